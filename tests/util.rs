//! Helpers shared by the integration tests.

use std::path::PathBuf;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `../shared` (or `$PPOL_SHARED`), when it exists. Tests that need it return early otherwise,
/// unless `PPOL_REQUIRE_SHARED=1` (the ../shared step of .ci/run), where a missing dir fails.
pub fn shared() -> Option<PathBuf> {
    let dir = std::env::var_os("PPOL_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared"));
    if dir.join("parity").is_dir() {
        Some(dir)
    } else if std::env::var("PPOL_REQUIRE_SHARED").as_deref() == Ok("1") {
        panic!("PPOL_REQUIRE_SHARED=1 but {} does not exist", dir.display());
    } else {
        eprintln!("skipped: {} not found", dir.display());
        None
    }
}

/// The `ppol` binary built for these tests.
pub fn ppol() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_ppol"))
}

/// Run the binary, returning (exit code, stdout, stderr).
pub fn run_ppol(args: &[&str]) -> (i32, String, String) {
    let out = ppol().args(args).output().expect("run ppol");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
