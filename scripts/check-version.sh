#!/usr/bin/env bash
# One version everywhere: the header's RP_VERSION_* (which the Makefile
# reads), the shared library's symbol map and the man pages must agree.
set -euo pipefail
cd "$(dirname "$0")/.."
want=$1
bad=0
map=$(sed -n 's/^RINGPIPE_\([0-9.]*\) {.*/\1/p' user/libringpipe.map | tail -1)
[ "$map" = "$want" ] || { echo "check-version: user/libringpipe.map's newest node is RINGPIPE_$map, the header says $want" >&2; bad=1; }
for page in Documentation/man/*.[0-9]; do
	# a ".so" page only links to another, whose .TH is checked
	head -1 "$page" | grep -q '^\.so ' && continue
	v=$(sed -n 's/^\.TH .*"ringpipe \([0-9.]*\)".*/\1/p' "$page")
	[ "$v" = "$want" ] || { echo "check-version: $page says version '${v:-none}' in .TH, the header says $want" >&2; bad=1; }
done
[ $bad = 0 ] && echo "  VERSION  $want (header, symbol map, man pages)"
exit $bad
