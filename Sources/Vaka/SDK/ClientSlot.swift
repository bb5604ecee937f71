import Synchronization

/// The client of one ``Vaka/start(_:)``, made on its first use instead of by `start` on the caller's thread: by
/// the `vaka.start` thread first thing, or by the first call that needs it before that thread got to it (a
/// capture, a breadcrumb, a log, a scope change, a flush, `close`, the exit hook, a `fork()`), whichever comes
/// first; a concurrent caller waits for it. `start` installs the crash handlers before it returns; making the
/// client (the options bounded, the DSN parsed, contexts, delivery, the session: ~0.1 ms, docs/cost.md) is work a
/// crash right after `start` does not wait for, and a program's `main` does not either.
final class ClientSlot: Sendable {
    /// This run's id (UUID string), known before the client is made.
    let runID: String
    /// The client once made (read without the lock by every call once it is).
    private let made = AtomicLazyReference<Client>()
    /// The making still to do, `nil` once done (or failed: the client is then `nil` for good).
    private let maker: Mutex<(@Sendable (ClientSlot) -> Client?)?>

    /// - Parameter make: makes the client (and does what a failure needs: a `[vaka]` line, the handlers taken
    ///   out); called once, with this slot, by the first ``client`` that finds none.
    init(runID: String, make: @escaping @Sendable (ClientSlot) -> Client?) {
        self.runID = runID
        maker = Mutex(make)
    }

    /// The client, made now by the calling thread when it was not yet (a concurrent caller waits for it); `nil`
    /// when it could not be made (delivery could not start: Vaka is off).
    var client: Client? {
        if let client = made.load() { return client }
        return maker.withLock { make -> Client? in
            if let client = made.load() { return client }
            guard let build = make else { return nil }
            make = nil
            guard let client = build(self) else { return nil }
            return made.storeIfNil(client)
        }
    }
}
