// Output of the `vaka` tool: every byte it prints goes through `writeOut` (stdout) or `writeErr` (stderr), which
// use write(2) directly. `FileHandle.write` traps (SIGILL) on a write error: a full disk (`> /dev/full`), a
// closed descriptor (`>&-`), a file over RLIMIT_FSIZE, a pipe whose reader is gone.
import Foundation
import VakaSymbolication

/// Writes `data` to standard output. When that fails (`ENOSPC`, `EBADF`, `EFBIG`, `EIO`, or `EPIPE` when the
/// parent ignored SIGPIPE), prints one `vaka: cannot write to standard output: <reason>` line on stderr (if
/// stderr can take it) and exits with status 1: the output is incomplete, so the command failed. With the
/// default SIGPIPE disposition a reader that went away (`vaka ... | head -c1`) ends vaka by SIGPIPE before
/// write(2) returns, quietly, as it does other filters (`cat`, `grep`).
func writeOut(_ data: Data) {
    let code = writeAll(1, data)
    guard code != 0 else { return }
    writeErr("vaka: cannot write to standard output: \(String(cString: strerror(code)))\n")
    exit(1)
}

/// ``writeOut(_:)`` of `text` as UTF-8.
func printOut(_ text: String) {
    writeOut(Data(text.utf8))
}

/// Writes `text` to standard error; a failure is ignored (there is nowhere left to report it).
func writeErr(_ text: String) {
    _ = writeAll(2, Data(text.utf8))
}

/// Called first thing in main:
/// - a descriptor 0, 1 or 2 the parent left closed (`vaka ... >&-`) is taken by `/dev/null` opened read-only,
///   so no file vaka opens later becomes "standard output" (its JSON would be written into it), and a write
///   to a closed stdout fails with `EBADF` (an error line, status 1);
/// - a write over RLIMIT_FSIZE fails with `EFBIG` (an error line, status 1) instead of killing vaka with
///   SIGXFSZ and a core dump. SIGPIPE keeps its default (see ``writeOut(_:)``).
func prepareOutput() {
    for fd: Int32 in 0...2 where fcntl(fd, F_GETFD) < 0 && errno == EBADF {
        let null = open("/dev/null", O_RDONLY)
        if null >= 0 && null != fd {
            _ = dup2(null, fd)
            close(null)
        }
    }
    signal(SIGXFSZ, SIG_IGN)
}

/// Prints `vaka: <message>` on stderr and exits with `status`.
func fail(_ message: String, status: Int32) -> Never {
    writeErr("vaka: \(message)\n")
    exit(status)
}
