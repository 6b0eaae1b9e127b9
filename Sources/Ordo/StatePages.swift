internal import CCacheHint

/// The rooms of a dense table of 64-byte states, one cache line each: the
/// allocator behind ``NodeSlab`` and ``ContractSlab``. Rooms are handed out
/// in order from 4 KiB pages, each aligned to its size (so a room finds its
/// page from its own address), in blocks of one page doubling up to 64
/// (256 KiB); a released room is reused by the next. Each page may hold a
/// header of `headerSize` bytes, which the table writes when the page is
/// made (``take(newPage:)``), at a place that depends on the page
/// (``header(of:headerSize:)``). Not thread-safe: its table guards it.
///
/// With `anchored` blocks every block is ``blockSize`` (64 pages) and
/// aligned to it, and only one page of each block holds a header, its
/// anchor (``anchor(of:headerSize:)``), written when the block is made: a
/// room then finds a header shared by the block's 4 095 rooms from its own
/// address, where its page's header would be shared by 63. (A write through
/// a C handle at 100 000 keypaths reads the header that names its bus:
/// 1 588 page headers fall out of the first two cache levels, 25 anchors
/// do not; docs/performance.md, "Writes held back".) The other pages of an
/// anchored block are rooms only, so ``header(of:headerSize:)`` and
/// ``index(of:headerSize:)`` are for tables that are not anchored. The
/// memory a block reserves but does not use is only address space until
/// its pages are used.
struct StatePages {
  static let pageSize = 4_096
  static let lineSize = 64
  /// Pages in the largest block, and in every anchored one.
  static let pagesPerBlock = 64
  static let blockSize = pagesPerBlock * pageSize

  /// The bytes of each page, its header, that hold no room.
  let headerSize: Int
  /// Rooms handed out, ever (released ones included): for tests of the reuse.
  private(set) var made = 0
  private var blocks: [UnsafeMutableRawPointer] = []
  /// Pages of the last block, and how many of them are in use.
  private var pagesInBlock = 0
  private var pagesUsed = 0
  /// The page rooms are handed out of, where its header lies (the page's
  /// size when it has none), how many rooms it holds and how many it has
  /// handed out.
  private var page: UnsafeMutableRawPointer?
  private var headerInPage = 0
  private var roomsInPage = 0
  private var usedInPage = 0
  /// Released rooms, by address.
  private var free: [UInt] = []
  /// Whether blocks are anchored (see the type).
  let anchored: Bool

  init(headerSize: Int, anchored: Bool = false) {
    precondition(headerSize == 0 || (headerSize % StatePages.lineSize == 0 && StatePages.pageSize % headerSize == 0 && headerSize < StatePages.pageSize))
    precondition(!anchored || headerSize > 0, "an anchor is a page header")
    self.headerSize = headerSize
    self.anchored = anchored
  }

  /// The page a room lies in.
  @inline(__always)
  static func page(of room: UnsafeRawPointer) -> UnsafeMutableRawPointer {
    UnsafeMutableRawPointer(bitPattern: UInt(bitPattern: room) & ~UInt(pageSize - 1)).unsafelyUnwrapped
  }

  /// Where a page's header starts in it: at a place that depends on the
  /// page, so that the headers of a table's pages fall in different cache
  /// sets. (At the start of every page, 4 KiB apart, they would all fall
  /// in one set of the first-level cache and in 16 of the second's, and a
  /// write through a C handle at 100 000 keypaths would wait for its
  /// page's header from the third level; docs/performance.md.)
  @inline(__always)
  static func headerOffset(ofPage page: UnsafeRawPointer, headerSize: Int) -> Int {
    guard headerSize > 0 else { return 0 }
    let places = UInt(pageSize / headerSize)
    return Int((UInt(bitPattern: page) / UInt(pageSize)) % places) * headerSize
  }

  /// The header of a room's page (a table that is not anchored).
  @inline(__always)
  static func header(of room: UnsafeRawPointer, headerSize: Int) -> UnsafeMutableRawPointer {
    let p = page(of: room)
    return p + headerOffset(ofPage: p, headerSize: headerSize)
  }

  /// The anchor of an anchored block: the header of one of its pages,
  /// chosen by the block (so that the anchors of a table's blocks, 256 KiB
  /// apart, fall in different cache sets), found from any room's address.
  @inline(__always)
  static func anchor(of room: UnsafeRawPointer, headerSize: Int) -> UnsafeMutableRawPointer {
    let block = UInt(bitPattern: room) & ~UInt(blockSize - 1)
    let k = (block / UInt(blockSize)) % UInt(pagesPerBlock)
    return header(of: UnsafeRawPointer(bitPattern: block + k * UInt(pageSize)).unsafelyUnwrapped, headerSize: headerSize)
  }

  /// A room's place among its page's rooms (a table that is not anchored).
  @inline(__always)
  static func index(of room: UnsafeRawPointer, headerSize: Int) -> Int {
    let p = page(of: room)
    let offset = UnsafeRawPointer(p).distance(to: room)
    return (offset < headerOffset(ofPage: p, headerSize: headerSize) ? offset : offset - headerSize) / lineSize
  }

  /// A room, uninitialized: a released one, or the next of the current
  /// page. `newPage` is called with the header of each page made for it
  /// (for an anchored block, with its anchor once, when the block is
  /// made).
  mutating func take(newPage: (UnsafeMutableRawPointer) -> Void = { _ in }) -> UnsafeMutableRawPointer {
    if let r = free.popLast() { return UnsafeMutableRawPointer(bitPattern: r).unsafelyUnwrapped }
    if usedInPage == roomsInPage {
      if pagesUsed == pagesInBlock {
        if anchored {
          pagesInBlock = StatePages.pagesPerBlock
          let b = UnsafeMutableRawPointer.allocate(byteCount: StatePages.blockSize, alignment: StatePages.blockSize)
          blocks.append(b)
          newPage(StatePages.anchor(of: b, headerSize: headerSize))
        } else {
          pagesInBlock = min(max(pagesInBlock * 2, 1), StatePages.pagesPerBlock)
          blocks.append(.allocate(byteCount: pagesInBlock * StatePages.pageSize, alignment: StatePages.pageSize))
        }
        pagesUsed = 0
      }
      let p = blocks[blocks.count - 1] + pagesUsed * StatePages.pageSize
      if anchored && p != StatePages.page(of: StatePages.anchor(of: p, headerSize: headerSize)) {
        headerInPage = StatePages.pageSize
      } else {
        headerInPage = StatePages.headerOffset(ofPage: p, headerSize: headerSize)
        if !anchored { newPage(p + headerInPage) }
      }
      roomsInPage = (StatePages.pageSize - (headerInPage < StatePages.pageSize ? headerSize : 0)) / StatePages.lineSize
      page = p
      pagesUsed += 1
      usedInPage = 0
    }
    defer {
      usedInPage += 1
      made += 1
    }
    let offset = usedInPage * StatePages.lineSize
    return page.unsafelyUnwrapped + (offset < headerInPage ? offset : offset + headerSize)
  }

  /// Gives a room back (deinitialized, holding no reference) for reuse, by
  /// its address.
  mutating func give(_ room: UInt) { free.append(room) }

  /// Frees every page (no room may be in use).
  func deallocate() {
    for b in blocks { b.deallocate() }
  }
}

/// Starts fetching the cache line at `p` now, for a use that comes later,
/// without waiting for it: a prefetch (``CCacheHint``), which the processor
/// overlaps with the fetches that follow and which never holds up the
/// instructions after it, where a load whose value decides a check does:
/// at 100 000 contracts such a load takes 79 % of the pass's scheduling
/// time (docs/performance.md). `p` need not be valid: a
/// prefetch never faults.
@inline(__always)
func fetchEarly(_ p: UnsafeRawPointer) {
  ordo_prefetch(p)
}

/// ``fetchEarly(_:)`` for a line about to be written.
@inline(__always)
func fetchEarlyForWrite(_ p: UnsafeRawPointer) {
  ordo_prefetch_for_write(p)
}
