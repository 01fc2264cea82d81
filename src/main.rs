fn main() -> std::process::ExitCode {
    ppol::cli::main()
}
