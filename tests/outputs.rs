//! Nothing clobbered by `-o` (issue #24): a device or FIFO given as the output is written in
//! place (never replaced by a regular file, nothing made beside it), a symbolic link is
//! followed and kept, and an existing file keeps its mode. Devices are private `mknod` nodes in
//! a temporary directory, never the machine's own.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::util::{root, run_ppol};

/// A private character device `major:minor` at `path`; `None` (the test is skipped) where
/// this user may not make one.
fn mknod(path: &Path, major: u32, minor: u32) -> Option<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mknod(2) with a valid NUL-terminated path.
    let r = unsafe {
        libc::mknod(
            c.as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(major, minor),
        )
    };
    if r != 0 {
        eprintln!(
            "skipped: mknod {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
        return None;
    }
    Some(())
}

fn demo(name: &str) -> String {
    root().join("fitness/demo").join(name).display().to_string()
}

/// The entries of `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn assert_still_device(path: &Path, rdev: u64, what: &str) {
    let m = std::fs::symlink_metadata(path).unwrap();
    assert!(
        m.file_type().is_char_device() && m.rdev() == rdev,
        "{what}: {} is no longer the device it was",
        path.display()
    );
}

/// The verbs with `-o`, each as its arguments before `-o OUT`.
fn verbs(tmp: &Path) -> Vec<(&'static str, Vec<String>)> {
    let episodes = tmp.join("in-episodes.jsonl");
    let (code, _, err) = run_ppol(&[
        "episodes",
        "--domain",
        "demo",
        "--quiet",
        "-o",
        episodes.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        ("fingerprint", s(&["fingerprint", &demo("human.jsonl")])),
        (
            "generate",
            s(&[
                "generate",
                "--program",
                root().join("seeds/offline_templates.py").to_str().unwrap(),
                "--task",
                "Cancel my order #W123",
                "-n",
                "2",
            ]),
        ),
        (
            "episodes",
            s(&["episodes", "--domain", "demo", "--tasks", "0,1", "--quiet"]),
        ),
        (
            "export sft",
            s(&[
                "export",
                "sft",
                episodes.to_str().unwrap(),
                "--heldout-fraction",
                "0.5",
            ]),
        ),
        ("reference", s(&["reference", &demo("human.jsonl")])),
        (
            "discriminator train",
            s(&[
                "discriminator",
                "train",
                "--human",
                &demo("human.jsonl"),
                "--baseline",
                &demo("baseline.jsonl"),
            ]),
        ),
    ]
}

/// `-o` a character device (a private /dev/null) with every verb: exit 0, the node is still
/// the same device, and nothing appears beside it (no `.partial`, `.heldout`, temp file).
#[test]
fn an_output_device_is_written_in_place_and_nothing_lands_beside_it() {
    let tmp = tempfile::tempdir().unwrap();
    let inputs = tmp.path().join("inputs");
    std::fs::create_dir(&inputs).unwrap();
    let dev_dir = tmp.path().join("dev");
    std::fs::create_dir(&dev_dir).unwrap();
    let null = dev_dir.join("null");
    if mknod(&null, 1, 3).is_none() {
        return;
    }
    let rdev = std::fs::metadata(&null).unwrap().rdev();
    for (verb, args) in verbs(&inputs) {
        let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
        argv.extend(["-o", null.to_str().unwrap()]);
        let (code, _, err) = run_ppol(&argv);
        assert_eq!(code, 0, "{verb}: {err}");
        assert_still_device(&null, rdev, verb);
        assert_eq!(
            listing(&dev_dir),
            ["null"],
            "{verb} made files beside the device"
        );
        match verb {
            "episodes" => assert!(
                err.contains("not a regular file") && err.contains(".partial"),
                "episodes must say it keeps no .partial file: {err}"
            ),
            "export sft" => assert!(
                err.contains("held-out records") && err.contains("not a regular file"),
                "export must say where the held-out records went: {err}"
            ),
            _ => {}
        }
    }
}

/// `-o` a private full device (`c 1 7`): exit 2 naming the file and ENOSPC; the node stays.
#[test]
fn an_output_full_device_fails_naming_enospc() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full");
    if mknod(&full, 1, 7).is_none() {
        return;
    }
    let rdev = std::fs::metadata(&full).unwrap().rdev();
    for args in [
        vec!["fingerprint", &demo("human.jsonl") as &str],
        vec!["reference", &demo("human.jsonl")],
    ] {
        let argv = [args.as_slice(), &["-o", full.to_str().unwrap()]].concat();
        let (code, _, err) = run_ppol(&argv);
        assert_eq!(code, 2, "{args:?} must fail: {err}");
        assert!(
            err.contains("ENOSPC") && err.contains(full.to_str().unwrap()),
            "{args:?}: {err}"
        );
        assert_still_device(&full, rdev, args[0]);
    }
    assert_eq!(listing(tmp.path()), ["full"]);
}

/// `-o` a FIFO: a reader gets the output and the FIFO stays a FIFO.
#[test]
fn an_output_fifo_is_written_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("pipe");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // the reader runs on its own thread: were the FIFO replaced, it would wait forever
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send(std::fs::read_to_string(fifo));
        });
    }
    let (code, _, err) = run_ppol(&[
        "fingerprint",
        &demo("human.jsonl"),
        "-o",
        fifo.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the FIFO's reader got nothing: the FIFO was replaced")
        .unwrap();
    assert_eq!(got.lines().count(), 25, "{got}");
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(listing(tmp.path()), ["pipe"]);
}

/// `-o` a symbolic link: the file it names is replaced (atomically) and the link stays a link;
/// an existing file keeps its mode; a link to nothing yet creates the file it names.
#[test]
fn an_output_link_is_followed_and_an_existing_file_keeps_its_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let target = data.join("fp.jsonl");
    std::fs::write(&target, "old\n").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o664)).unwrap();
    let link = tmp.path().join("fp-link.jsonl");
    std::os::unix::fs::symlink("data/fp.jsonl", &link).unwrap();
    let dangling = tmp.path().join("new-link.jsonl");
    std::os::unix::fs::symlink("data/new.jsonl", &dangling).unwrap();
    let plain = tmp.path().join("plain.jsonl");
    std::fs::write(&plain, "old\n").unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o640)).unwrap();
    for out in [&link, &dangling, &plain] {
        let (code, _, err) = run_ppol(&[
            "fingerprint",
            &demo("human.jsonl"),
            "-o",
            out.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
    }
    for (l, to) in [(&link, "data/fp.jsonl"), (&dangling, "data/new.jsonl")] {
        assert!(
            std::fs::symlink_metadata(l).unwrap().is_symlink(),
            "{} is no longer a link",
            l.display()
        );
        assert_eq!(std::fs::read_link(l).unwrap(), PathBuf::from(to));
    }
    for f in [&target, &data.join("new.jsonl"), &plain] {
        let text = std::fs::read_to_string(f).unwrap();
        assert_eq!(text.lines().count(), 25, "{}: {text}", f.display());
    }
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(&target), 0o664, "the link's target lost its mode");
    assert_eq!(mode(&plain), 0o640, "the file lost its mode");
    // nothing left over: no temp files
    assert_eq!(listing(&data), ["fp.jsonl", "new.jsonl"]);
}
