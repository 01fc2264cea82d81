//! Loading traces.

use ppol::fitness::traces::{self, LoadOptions};

#[test]
fn invalid_utf8_is_reported_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("latin1.jsonl");
    let mut bytes = "\u{feff}{\"conversation\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n\n"
        .to_string()
        .into_bytes();
    bytes.extend_from_slice(b"{\"conversation\":[{\"role\":\"user\",\"content\":\"caf\xe9\"}]}\n");
    std::fs::write(&p, &bytes).unwrap();
    let bad = bytes.iter().position(|&b| b == 0xe9).unwrap();
    let e = traces::load(&p, &LoadOptions::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: line 3: not UTF-8 text (byte {bad} of the file); trace files must be UTF-8",
            p.display()
        )
    );
    // far into a file of many pieces (checked in parallel), the first bad byte is the one named
    let line = "{\"conversation\":[{\"role\":\"user\",\"content\":\"hello there\"}]}\n";
    let mut big = line.repeat(40_000).into_bytes();
    let at = line.len() * 30_000 + 10;
    big[at] = 0xff;
    big[line.len() * 35_000 + 10] = 0xfe;
    std::fs::write(&p, &big).unwrap();
    let e = traces::load(&p, &LoadOptions::default()).unwrap_err();
    assert!(
        e.to_string().contains(&format!(
            ": line 30001: not UTF-8 text (byte {at} of the file)"
        )),
        "{e}"
    );
}
