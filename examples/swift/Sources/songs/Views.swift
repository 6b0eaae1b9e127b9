/// Main-actor state, as a view's.
@MainActor final class Header {
  var text = ""
  var redraws = 0
}

/// A view that lives for a while; its contract goes with it.
final class ItemsView: Sendable {
  let name: String
  init(_ name: String) { self.name = name }
}
