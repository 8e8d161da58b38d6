#!/usr/bin/env bash
# html-chromium.sh - ftcomm-trace's HTML page, opened in headless Chromium:
# the page of a diverging job must render with the first divergence marked
# (id="divergence", at the culprit's seq) and the headline; a healthy job's
# page must have no mark; the coordinator's verdict, when there is one, shows. Skipped, with a message, when Chromium is absent.
set -u
cd "$(dirname "$0")/../.."
trace=${FTC_REC_TRACE:-build/release/bin/ftcomm-trace}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "SKIP: no chromium on PATH; the HTML page was not checked in a browser"
  exit 0
fi
[ -x "$trace" ] || { echo "missing $trace (run make)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
render() { # html -> rendered DOM on stdout
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$(mktemp -d -p "$tmp")" --dump-dom "file://$1" 2>/dev/null
}
fail=0
"$trace" --html "$tmp/stuck.html" tests/recorder/cases/stuck-started >/dev/null
render "$tmp/stuck.html" >"$tmp/stuck.dom"
grep -q 'id="divergence"' "$tmp/stuck.dom" || { echo "FAIL: no id=divergence in the rendered page"; fail=1; }
grep -q 'data-seq="21"' "$tmp/stuck.dom" || { echo "FAIL: the divergence is not at seq 21"; fail=1; }
grep -q 'rank 2 stuck in world epoch 0 seq 21' "$tmp/stuck.dom" || { echo "FAIL: headline missing"; fail=1; }
grep -q '<svg' "$tmp/stuck.dom" || { echo "FAIL: no timeline"; fail=1; }
# Nothing is fetched: no URL other than the SVG namespace.
grep -Eo '(src|href)="[^"]*"' "$tmp/stuck.html" && { echo "FAIL: the page refers to other files"; fail=1; }

"$trace" --html "$tmp/healthy.html" tests/recorder/cases/healthy >/dev/null
render "$tmp/healthy.html" >"$tmp/healthy.dom"
grep -q 'class="healthy"' "$tmp/healthy.dom" || { echo "FAIL: healthy page not rendered"; fail=1; }
grep -q 'id="divergence"' "$tmp/healthy.dom" && { echo "FAIL: a healthy job's page marks a divergence"; fail=1; }

# The coordinator's verdict, when the dumps carry one, is on the page.
"$trace" --html "$tmp/verdict.html" tests/recorder/cases/verdict-agrees >/dev/null
render "$tmp/verdict.html" >"$tmp/verdict.dom"
grep -q 'id="verdict">Verdict: the coordinator.s epoch 1 drops from epoch 0: rank 1 crashed' "$tmp/verdict.dom" ||
  { echo "FAIL: the verdict is not on the page"; fail=1; }

[ $fail = 0 ] && echo "ok   HTML page rendered in $(basename "$browser"), divergence marked"
exit $fail
