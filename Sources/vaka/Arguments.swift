// The one argument parser of the `vaka` tool: every command declares its syntax (flags, options with a value,
// usage text) and the command tree dispatches to it. Usage errors exit with status 2 and one `vaka: ...` line;
// `-h`/`--help` prints the command's usage and exits 0.
import Foundation

/// The words that ask a command group for its usage: `vaka report --help`, `vaka outbox help`.
let helpWords: Set<String> = ["-h", "--help", "help"]

/// What one command accepts after its name, and how its usage errors read.
struct ArgumentSyntax: Sendable {
    /// Which arguments that start with `-` are operands rather than options.
    enum DashOperands: Sendable {
        /// Only `-` itself (a file name by convention).
        case lone
        /// Integers (`-1`, an index from the end); `-` itself is an unknown option.
        case integers
    }

    /// The command as unknown-option messages name it: `unknown option --x for 'report convert'`.
    var command: String
    /// The command whose `--help` the messages point to: `(see vaka report --help)`.
    var helpCommand: String
    /// Printed on stdout for `-h` or `--help`.
    var usage: String
    /// Options without a value, e.g. `--pretty`.
    var flags: Set<String> = []
    /// Options with a value, given as `--opt VALUE` or `--opt=VALUE`; each may repeat.
    var options: Set<String> = []
    /// The message for an option given last without its value, by option; the default is
    /// `<option> needs a value (see <helpCommand> --help)`.
    var missingValueMessages: [String: String] = [:]
    /// Whether `--` ends the options (every later argument is an operand).
    var endOfOptionsMarker = true
    /// Which dash-arguments are operands.
    var dashOperands = DashOperands.lone

    /// Reads `arguments` (the words after the command's name). Never returns on `-h`/`--help` (usage on stdout,
    /// status 0) or a usage error (an unknown option, an option without its value: one line on stderr, status 2).
    func parse(_ arguments: ArraySlice<String>) -> ParsedArguments {
        var parsed = ParsedArguments()
        var onlyOperands = false
        var iterator = arguments.makeIterator()
        while let argument = iterator.next() {
            if onlyOperands { parsed.operands.append(argument); continue }
            if argument == "-h" || argument == "--help" { printOut(usage); exit(0) }
            if endOfOptionsMarker && argument == "--" { onlyOperands = true; continue }
            if flags.contains(argument) { parsed.flags.insert(argument); continue }
            if let equals = argument.firstIndex(of: "="), options.contains(String(argument[..<equals])) {
                parsed.values[String(argument[..<equals]), default: []].append(String(argument[argument.index(after: equals)...]))
                continue
            }
            if options.contains(argument) {
                guard let value = iterator.next() else {
                    fail(missingValueMessages[argument] ?? "\(argument) needs a value (see \(helpCommand) --help)", status: 2)
                }
                parsed.values[argument, default: []].append(value)
                continue
            }
            if argument.hasPrefix("-") && !isDashOperand(argument) {
                fail("unknown option \(argument) for '\(command)' (see \(helpCommand) --help)", status: 2)
            }
            parsed.operands.append(argument)
        }
        return parsed
    }

    private func isDashOperand(_ argument: String) -> Bool {
        switch dashOperands {
        case .lone: argument == "-"
        case .integers: Int(argument) != nil
        }
    }
}

/// A command line as ``ArgumentSyntax/parse(_:)`` read it.
struct ParsedArguments: Sendable {
    /// The arguments that are not options, in order.
    var operands: [String] = []
    /// The flags given.
    var flags: Set<String> = []
    /// The values of each option given, in order.
    var values: [String: [String]] = [:]

    /// Whether `flag` was given.
    func has(_ flag: String) -> Bool { flags.contains(flag) }
    /// Every value given for `option`, in order (empty when none).
    func values(_ option: String) -> [String] { values[option] ?? [] }
}

/// A command that runs: its syntax and what it does with its arguments (it never returns; it exits).
struct Command: Sendable {
    /// Its arguments.
    var syntax: ArgumentSyntax
    /// Runs it.
    var run: @Sendable (ParsedArguments) -> Never

    /// Parses `arguments` (the words after the command's name) with ``syntax`` and runs the command.
    func execute(_ arguments: ArraySlice<String>) -> Never {
        run(syntax.parse(arguments))
    }
}

/// Commands under one name: `vaka report convert`, `vaka debug-files check|collect`, `vaka outbox list|show`.
struct CommandGroup: Sendable {
    /// The group's name, e.g. `debug-files`.
    var name: String
    /// Printed on stdout for `vaka NAME -h|--help|help`.
    var usage: String
    /// Its commands for the message when none is given, e.g. `check or collect`.
    var commandList: String
    /// Its commands by name.
    var commands: [String: Command]
    /// Set when all commands share this syntax and it is read before the command's name is checked (`outbox`:
    /// `vaka outbox explode --help` shows the usage).
    var sharedSyntax: ArgumentSyntax?

    /// Runs the command `arguments` names (the words after the group's name); never returns. Status 2 with one
    /// line when the command is missing or unknown.
    func run(_ arguments: ArraySlice<String>) -> Never {
        guard let name = arguments.first else {
            fail("\(self.name) needs a command: \(commandList) (see vaka \(self.name) --help)", status: 2)
        }
        if helpWords.contains(name) { printOut(usage); exit(0) }
        let shared = sharedSyntax.map { $0.parse(arguments.dropFirst()) }
        guard let command = commands[name] else {
            fail("unknown \(self.name) command '\(name)' (see vaka \(self.name) --help)", status: 2)
        }
        if let shared { command.run(shared) }
        command.execute(arguments.dropFirst())
    }
}
