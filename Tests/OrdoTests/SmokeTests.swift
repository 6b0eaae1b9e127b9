import Testing
@testable import Ordo
@Test func smoke() throws { let b = Bus(); b.begin(); try b.set("a", .int64(1)); #expect(try b.commit() == 1) }
