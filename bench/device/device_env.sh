# Sourced by the device scripts: the output folders, the carried binaries and the step banner.
# Usage: W=/tmp/NAME; . bench/device/device_env.sh   (sets OUT, B, LD_LIBRARY_PATH; defines step)
OUT=${OUT:-out/device}
mkdir -p "$OUT" "$W"
export LD_LIBRARY_PATH=$PWD/.devbin:${LD_LIBRARY_PATH:-}
B=.devbin
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
# archive_logs NAME [SUMMARY]: logs go to $LOG (/tmp/tf-NAME-logs, emptied) and, at exit, into one archive
# $OUT/NAME-logs.tar.gz (a device call returns only a few files), with $LOG/SUMMARY copied beside it.
archive_logs() {
  LOG=/tmp/tf-$1-logs
  ARCHIVE_NAME=$1 ARCHIVE_SUMMARY=${2:-}
  rm -rf "$LOG" && mkdir -p "$LOG"
  trap 'tar czf "$OUT/$ARCHIVE_NAME-logs.tar.gz" -C "$LOG" . 2>/dev/null
        [ -n "$ARCHIVE_SUMMARY" ] && cp "$LOG/$ARCHIVE_SUMMARY" "$OUT/" 2>/dev/null; true' EXIT
}
