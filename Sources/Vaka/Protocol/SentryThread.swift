/// One entry of `threads.values`: a thread of the process. (Named `SentryThread` so that it does not
/// shadow Foundation's `Thread`.)
public struct SentryThread: Codable, Equatable, Sendable {
    /// Kernel thread id (`gettid()`).
    public var id: Int64?
    /// Thread name (`prctl(PR_GET_NAME)`, at most 15 bytes on Linux).
    public var name: String?
    /// `true` for the thread that crashed.
    public var crashed: Bool?
    /// `true` for the thread that was running when the event was captured.
    public var current: Bool?
    /// The thread's stack, oldest frame first.
    public var stacktrace: Stacktrace?

    /// Creates a thread; every field is described on its property.
    public init(id: Int64? = nil, name: String? = nil, crashed: Bool? = nil, current: Bool? = nil,
                stacktrace: Stacktrace? = nil) {
        self.id = id
        self.name = name
        self.crashed = crashed
        self.current = current
        self.stacktrace = stacktrace
    }
}
