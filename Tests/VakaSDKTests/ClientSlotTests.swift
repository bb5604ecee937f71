import XCTest
import Synchronization
import VakaTestSupport
@testable import Vaka

/// ``ClientSlot``: the client of a start is made once, by whichever caller comes first, and every caller gets
/// that one; a making that fails gives `nil` to every caller, once.
final class ClientSlotTests: XCTestCase {
    let dirs = ScratchDirs()
    override func tearDown() { dirs.removeAll() }

    /// 16 threads ask at once (the `vaka.start` thread and calls right after start race like this): the maker
    /// runs once, every thread gets the same client.
    func testConcurrentCallersGetTheOneClientMadeOnce() throws {
        for round in 0..<20 {
            let storage = dirs.make("slot-\(round)")
            let makes = Atomic<Int>(0)
            let slot = ClientSlot(runID: "SLOT-\(round)") { _ in
                makes.add(1, ordering: .relaxed)
                usleep(2_000)  // a making that takes a while, so that the others come while it runs
                return try? Client(options: Vaka.Options(sessionTracking: false, storageDirectory: storage),
                                   storage: storage, runID: "SLOT-\(round)", dsn: nil, log: nil)
            }
            let got = Mutex<[ObjectIdentifier]>([])
            DispatchQueue.concurrentPerform(iterations: 16) { _ in
                let client = slot.client
                got.withLock { $0.append(client.map(ObjectIdentifier.init) ?? ObjectIdentifier(NSNull.self)) }
            }
            XCTAssertEqual(makes.load(ordering: .relaxed), 1, "round \(round)")
            let ids = got.withLock { $0 }
            XCTAssertEqual(ids.count, 16)
            XCTAssertEqual(Set(ids).count, 1, "round \(round): one client for every caller")
            XCTAssertNotNil(slot.client)
            XCTAssertEqual(ids.first, slot.client.map(ObjectIdentifier.init))
            slot.client?.end(timeout: 0)
        }
    }

    /// A making that fails (delivery could not start) is not tried again: `nil` for every caller.
    func testFailedMakingGivesNilOnce() {
        let makes = Atomic<Int>(0)
        let slot = ClientSlot(runID: "SLOT-FAIL") { _ in
            makes.add(1, ordering: .relaxed)
            return nil
        }
        DispatchQueue.concurrentPerform(iterations: 8) { _ in XCTAssertNil(slot.client) }
        XCTAssertNil(slot.client)
        XCTAssertEqual(makes.load(ordering: .relaxed), 1)
    }

    /// `Vaka.start` leaves the client to be made: the run's id is there at once, and the first call made it
    /// (the same client the `vaka.start` thread uses: one run, one session).
    func testStartThenCallsRightAwayUseOneRun() throws {
        let storage = dirs.make("start-slot")
        Vaka.start(Vaka.Options(release: "app@1", sessionTracking: true, storageDirectory: storage))
        let ids = Mutex<Set<String>>([])
        DispatchQueue.concurrentPerform(iterations: 8) { i in
            Vaka.capture(message: "right away \(i)")
            if let id = Vaka.runID { ids.withLock { _ = $0.insert(id) } }
        }
        XCTAssertEqual(ids.withLock { $0.count }, 1)
        Vaka.close(timeout: 5)
        let envelopes = try readOutbox(storage)
        let messages = envelopes.flatMap(\.events).compactMap { dig($0, "logentry", "formatted") as? String }
        XCTAssertEqual(Set(messages), Set((0..<8).map { "right away \($0)" }))
        XCTAssertEqual(messages.count, 8)
        let sids = Set(envelopes.flatMap(\.sessions).compactMap { $0["sid"] as? String })
        XCTAssertEqual(sids.count, 1, "one session")
    }

    /// A client made after its run was closed (its end made it, or its `vaka.start` thread came late) does not
    /// become the target of `fork()`'s prepare step in place of the started run's client: a fork would then
    /// prepare the wrong client (or none, once that one is freed), and a child forked while the started run's
    /// thread holds a lock could hang.
    func testClientMadeAfterItsRunWasClosedIsNotTheForkTarget() throws {
        let started = dirs.make("fork-target-started")
        Vaka.start(Vaka.Options(release: "app@1", sessionTracking: false, storageDirectory: started))
        defer { Vaka.close(timeout: 5) }
        let current = try XCTUnwrap(Vaka.current)
        XCTAssertTrue(Client.currentForkTarget === current)
        let late = dirs.make("fork-target-late")
        let runID = UUID().uuidString
        let slot = ClientSlot(runID: runID) { slot in
            Vaka.makeClient(Vaka.Options(release: "app@1", sessionTracking: false, storageDirectory: late), storage: late.path,
                            runID: runID, log: nil, makeStorage: nil, startPID: getpid(), slot: slot)
        }
        let made = try XCTUnwrap(slot.client)
        XCTAssertFalse(made === current)
        XCTAssertTrue(Client.currentForkTarget === current, "the started run's client stays the fork target")
        made.end(timeout: 0)
    }
}
