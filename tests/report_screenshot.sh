#!/usr/bin/env bash
# Screenshot of `ppol report` for a run directory, to look at the page as a person would.
#
#   tests/report_screenshot.sh RUN_DIR OUT.png
#
# 1. renders RUN_DIR/report.html with `ppol report` ($PPOL_BIN if set, else `cargo run`);
# 2. installs Debian's chromium when it is missing (apt-get; needs root, as on the dev machines);
# 3. takes a headless 1400x3000 screenshot of the file (no network: the report is
#    self-contained, and chromium's background networking is switched off) and prints OUT.png.
#
# A fixture run to try it on: `cargo test --test integration -- --ignored write_report_fixture`
# writes one to target/report-fixture (or $PPOL_REPORT_FIXTURE).
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 RUN_DIR OUT.png" >&2
  exit 2
fi
RUN_DIR=$1
OUT=$2
cd "$(dirname "$0")/.."

HTML="$RUN_DIR/report.html"
if [ -n "${PPOL_BIN:-}" ]; then
  "$PPOL_BIN" report "$RUN_DIR" -o "$HTML" >/dev/null
else
  cargo run --quiet --bin ppol -- report "$RUN_DIR" -o "$HTML" >/dev/null
fi

if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y chromium
fi

ABS_HTML="$(cd "$(dirname "$HTML")" && pwd)/$(basename "$HTML")"
mkdir -p "$(dirname "$OUT")"
ABS_OUT="$(cd "$(dirname "$OUT")" && pwd)/$(basename "$OUT")"
PROFILE="$(mktemp -d)"
trap 'rm -rf "$PROFILE"' EXIT

chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$PROFILE" --hide-scrollbars --window-size=1400,3000 \
  --screenshot="$ABS_OUT" "file://$ABS_HTML" >/dev/null 2>&1

test -s "$ABS_OUT"
echo "$ABS_OUT"
