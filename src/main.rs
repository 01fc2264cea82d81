fn main() -> std::process::ExitCode {
    ppol::front::cli::main()
}
