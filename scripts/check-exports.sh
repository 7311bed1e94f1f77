#!/usr/bin/env bash
# Checks that libringpipe.so exports exactly the symbols user/libringpipe.map lists.
set -euo pipefail
lib=$1 map=$2
want=$(sed -n 's/^[[:space:]]*\(rp_[a-z0-9_]*\);/\1/p' "$map" | sort)
have=$(nm -D --defined-only "$lib" | awk '$2 ~ /[TDB]/ {print $3}' | sed 's/@.*//' | grep -v '^RINGPIPE_' | sort)
if [ "$want" != "$have" ]; then
	echo "export list mismatch for $lib:" >&2
	diff <(echo "$want") <(echo "$have") >&2 || true
	exit 1
fi
echo "exports ok: $(echo "$have" | wc -l) symbols"
