import Synchronization
#if canImport(Glibc)
    import Glibc
#endif

/// Standard input as single key presses, for a person at a terminal: raw mode (no line editing,
/// no echo; Ctrl-C still sends SIGINT), so a key acts at once and never lands in a status line.
///
/// The terminal's own mode is saved when raw mode starts and given back by `restore()`: the
/// command calls it when it ends (normally or by an error), it runs at process exit (`exit`, as
/// ArgumentParser's error exits call it) and before the forced exit of a second signal
/// (`Signals`). Restoring twice is harmless. One raw mode per process; thread-safe.
enum TerminalKeys {
    /// The mode standard input had before `enterRawMode`; nil when it is not raw.
    private static let saved = Mutex<termios?>(nil)

    /// Puts standard input in raw mode. False (and nothing changed) when standard input is not a
    /// terminal or its mode cannot be read or set.
    static func enterRawMode() -> Bool {
        guard isatty(STDIN_FILENO) == 1 else { return false }
        var mode = termios()
        guard tcgetattr(STDIN_FILENO, &mode) == 0 else { return false }
        var raw = mode
        raw.c_lflag &= ~tcflag_t(ICANON | ECHO)
        withUnsafeMutableBytes(of: &raw.c_cc) { cc in
            cc[Int(VMIN)] = 1
            cc[Int(VTIME)] = 0
        }
        let entered = saved.withLock { s -> Bool in
            guard s == nil else { return true }
            guard tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0 else { return false }
            s = mode
            return true
        }
        if entered { registerExitHook }
        return entered
    }

    /// Gives standard input back the mode it had before `enterRawMode` (nothing if it is not raw).
    static func restore() {
        saved.withLock { s in
            guard var mode = s else { return }
            _ = tcsetattr(STDIN_FILENO, TCSANOW, &mode)
            s = nil
        }
    }

    /// Waits for the next key press (one byte; a key that sends several, such as an arrow, comes
    /// as several). Nil at end of input or on a read error.
    static func nextKey() -> UInt8? {
        var byte: UInt8 = 0
        while true {
            let n = read(STDIN_FILENO, &byte, 1)
            if n == 1 { return byte }
            if n < 0 && errno == EINTR { continue }
            return nil
        }
    }

    /// Registers `restore` to run at process exit, once.
    private static let registerExitHook: Void = {
        atexit { TerminalKeys.restore() }
    }()
}
