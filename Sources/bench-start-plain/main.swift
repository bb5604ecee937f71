// scripts/bench's baseline for process start: a Swift program without Foundation that does nothing.
// `bench-start-plain crash` dereferences NULL instead (bench_null_deref, SIGSEGV).
import BenchNullDeref

if CommandLine.arguments.count > 1 && CommandLine.arguments[1] == "crash" { _ = bench_null_deref() }
bench_report_memory()  // $BENCH_START_MEMORY: resident memory now, for scripts/bench
