import Ordo

/// A document: a title, a count, and items addressed under `doc.items`,
/// as typed properties of a bus. The model keeps no reference to the bus,
/// so contracts may capture it without a retain cycle.
final class Document: Sendable {
  let title: Property<String>
  let count: Property<Int>
  let items: KeypathScope

  init(_ bus: Bus) throws(OrdoError) {
    let doc = try bus.scope("doc")
    title = try doc.property("title")
    count = try doc.property("count")
    items = try doc.scope("items")
  }

  /// The title of item `i`, at `doc.items.<i>`.
  func item(_ i: Int) throws(OrdoError) -> Property<String> { try items.property("\(i)") }
}

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
