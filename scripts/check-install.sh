#!/usr/bin/env bash
# An install used the way a user uses one: `make install` into a temporary
# DESTDIR, then tests/install/consumer.c built against that copy through
# pkg-config (linked with libringpipe.so and with libringpipe.a, compiled as
# C11, as C99 and as C++17, both public headers at -pedantic -Werror), and
# every build run. Last, `make uninstall` must remove every file the install
# put there.
#
#   OUT=.output/default scripts/check-install.sh      (what make check-install runs)
#
# OUT is the build directory; its parent is the make OUTPUT, passed through so
# that the install takes the files already built there instead of building
# anew. Nothing outside the temporary directory is touched.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${OUT:?set OUT to the build directory, e.g. OUT=.output/default}"
if [ "$(basename "$OUT")" != default ]; then
	echo "check-install: OUT=$OUT is a sanitizer build; the install check uses" \
	     "the default one (OUT=$(dirname "$OUT")/default)" >&2
	exit 1
fi
OUTPUT=$(dirname "$OUT")
CC=${CC:-gcc}
CXX=${CXX:-g++}
PREFIX=/usr/local
VERSION=$(sed -n 's/^#define RP_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' \
	include/ringpipe/ringpipe.h | paste -sd.)
SOVERSION=${VERSION%%.*}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ringpipe-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/dest
root=$dest$PREFIX
log=$tmp/log

step() { printf '  %-8s %s\n' "$1" "$2"; }
fail() { echo "check-install: $*" >&2; exit 1; }
# runs a command with its output in $log, shown only when it fails
quiet() { "$@" >"$log" 2>&1 || { cat "$log" >&2; fail "failed: $*"; }; }

# The install's own variables are all given, so that nothing the calling make
# was passed (LIBDIR=..., SAN=...) redirects the install under test.
inst_make() {
	make --no-print-directory OUTPUT="$OUTPUT" SAN= DESTDIR="$dest" PREFIX="$PREFIX" \
		LIBDIR="$PREFIX/lib" INCDIR="$PREFIX/include" BINDIR="$PREFIX/bin" \
		MANDIR="$PREFIX/share/man" "$@"
}

# ---- install -------------------------------------------------------------
step INSTALL "make install DESTDIR=$dest PREFIX=$PREFIX (OUTPUT=$OUTPUT)"
quiet inst_make install

expect=(lib/libringpipe.a "lib/libringpipe.so.$VERSION" "lib/libringpipe.so.$SOVERSION"
	lib/libringpipe.so lib/pkgconfig/libringpipe.pc bin/ringpipe bin/ringpipe-demo)
for h in include/ringpipe/*.h; do expect+=("$h"); done
for m in Documentation/man/*.1; do expect+=("share/man/man1/${m##*/}"); done
for m in Documentation/man/*.3; do [ -e "$m" ] && expect+=("share/man/man3/${m##*/}"); done
for f in "${expect[@]}"; do
	[ -e "$root/$f" ] || fail "make install did not install $PREFIX/$f"
done
for h in include/ringpipe/*.h; do
	cmp -s "$h" "$root/$h" || fail "$PREFIX/$h differs from $h"
done
for l in "libringpipe.so.$SOVERSION" libringpipe.so; do
	case $(readlink "$root/lib/$l") in
	/*) fail "$PREFIX/lib/$l is an absolute symlink: it breaks under DESTDIR" ;;
	esac
done
[ -x "$root/bin/ringpipe" ] && [ -x "$root/bin/ringpipe-demo" ] ||
	fail "the installed tools are not executable"
step INSTALL "${#expect[@]} files in place"

# ---- pkg-config ----------------------------------------------------------
# --define-prefix derives prefix from where the .pc file lies, so the
# ${prefix}-relative paths must resolve into the DESTDIR copy.
unset PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_LIBDIR
export PKG_CONFIG_PATH=$root/lib/pkgconfig
pc() { pkg-config --define-prefix "$@" libringpipe; }
step PKGCONF "libringpipe.pc from $PKG_CONFIG_PATH"
pcfile=$root/lib/pkgconfig/libringpipe.pc
! grep -qF "$dest" "$pcfile" || fail "libringpipe.pc names the DESTDIR ($dest)"
[ "$(pc --modversion)" = "$VERSION" ] ||
	fail "pkg-config --modversion says $(pc --modversion), the header $VERSION"
[ "$(pc --variable=libdir)" = "$root/lib" ] ||
	fail "libdir resolves to $(pc --variable=libdir), not $root/lib: is it \${prefix}-relative?"
[ "$(pc --variable=includedir)" = "$root/include" ] ||
	fail "includedir resolves to $(pc --variable=includedir), not $root/include"
cflags=$(pc --cflags)
libs=$(pc --libs)
static_libs=$(pc --static --libs)
case " $static_libs " in
*" -lringpipe "*) static_libs=${static_libs/-lringpipe/-l:libringpipe.a} ;;
*) fail "pkg-config --static --libs lacks -lringpipe: $static_libs" ;;
esac

# ---- the public headers on their own -------------------------------------
for h in "$root"/include/ringpipe/*.h; do
	h=ringpipe/${h##*/}
	printf '#include <%s>\n' "$h" > "$tmp/hdr.c"
	quiet "$CC" -std=c99 -pedantic -Wall -Wextra -Werror $cflags -fsyntax-only "$tmp/hdr.c"
	quiet "$CC" -std=c11 -pedantic -Wall -Wextra -Werror $cflags -fsyntax-only "$tmp/hdr.c"
	quiet "$CXX" -std=c++17 -pedantic -Wall -Wextra -Werror $cflags -fsyntax-only \
		-x c++ "$tmp/hdr.c"
	step HDR "<$h> alone: C99, C11, C++17"
done

# ---- the consumer, four ways ---------------------------------------------
src=tests/install/consumer.c
# the consumer's diagnostics socket goes to the temporary directory, and no
# startup session or extra port comes from the caller's environment
unset RINGPIPE_OUTPUT RINGPIPE_PROVIDERS RINGPIPE_ENABLE_DIAGNOSTICS RINGPIPE_DIAGNOSTIC_PORTS \
	DOTNET_DiagnosticPorts COMPlus_DiagnosticPorts DOTNET_EnableDiagnostics \
	COMPlus_EnableDiagnostics DOTNET_EnableDiagnostics_IPC COMPlus_EnableDiagnostics_IPC \
	DOTNET_DefaultDiagnosticPortSuspend COMPlus_DefaultDiagnosticPortSuspend

# run NAME [env...]: runs $tmp/NAME, which writes $tmp/NAME.nettrace
run() {
	local name=$1 out rc=0

	shift
	out=$(env "$@" TMPDIR="$tmp" "$tmp/$name" "$tmp/$name.nettrace" 2>&1) || rc=$?
	if [ $rc != 0 ] || ! grep -qx "ringpipe $VERSION abi [0-9]*" <<<"$out" ||
	   ! grep -q '^ok: ' <<<"$out"; then
		printf '%s\n' "$out" >&2
		fail "$name exited with $rc; expected 0, \"ringpipe $VERSION abi N\", \"ok: ...\""
	fi
	step RUN "$name: $(grep '^ok: ' <<<"$out" | sed 's/^ok: //')"
}

# the libraries a program needs (the output is captured whole and grepped
# afterwards: grep -q in a pipeline would SIGPIPE the writer under pipefail)
needs() { readelf -d "$tmp/$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

step CC "$src, C11, linked with libringpipe.so"
quiet "$CC" -std=c11 -Wall -Wextra -Werror $cflags "$src" -o "$tmp/consumer-shared" $libs
grep -qx "libringpipe.so.$SOVERSION" <<<"$(needs consumer-shared)" ||
	fail "consumer-shared does not need libringpipe.so.$SOVERSION"
loaded=$(LD_LIBRARY_PATH=$root/lib ldd "$tmp/consumer-shared")
grep -q "libringpipe.so.$SOVERSION => $root/lib/" <<<"$loaded" ||
	fail "consumer-shared does not load the installed libringpipe.so"
run consumer-shared LD_LIBRARY_PATH="$root/lib"

step CC "$src, C11, linked with libringpipe.a (pkg-config --static)"
quiet "$CC" -std=c11 -Wall -Wextra -Werror $cflags "$src" -o "$tmp/consumer-static" $static_libs
! grep -q libringpipe <<<"$(needs consumer-static)" ||
	fail "consumer-static still needs libringpipe.so"
run consumer-static -u LD_LIBRARY_PATH

step CC "$src as C99 (-std=c99 -pedantic)"
quiet "$CC" -std=c99 -pedantic -Wall -Wextra -Werror $cflags "$src" -o "$tmp/consumer-c99" $libs
run consumer-c99 LD_LIBRARY_PATH="$root/lib"

step CXX "$src as C++17 (-x c++ -std=c++17 -pedantic)"
quiet "$CXX" -std=c++17 -Wall -Wextra -pedantic -Werror $cflags -x c++ "$src" -x none \
	-o "$tmp/consumer-cxx" $libs
run consumer-cxx LD_LIBRARY_PATH="$root/lib"

# ---- the installed tools -------------------------------------------------
v=$("$root/bin/ringpipe" --version) || fail "installed ringpipe --version failed"
[ "$v" = "ringpipe $VERSION" ] || fail "installed ringpipe --version says '$v'"
usage=$("$root/bin/ringpipe-demo" --help 2>&1) || fail "installed ringpipe-demo --help failed"
grep -q '^usage: ringpipe-demo' <<<"$usage" ||
	fail "installed ringpipe-demo --help prints no usage"
report=$("$root/bin/ringpipe" report --json "$tmp/consumer-shared.nettrace") ||
	fail "installed ringpipe report failed on the consumer's trace"
grep -q '"events":1000,' <<<"$report" && grep -q '"lost":0,' <<<"$report" ||
	fail "ringpipe report on the consumer's trace: expected 1000 events, 0 lost: $report"
step RUN "installed ringpipe reads the consumer's trace: 1000 events, 0 lost"

# ---- uninstall -----------------------------------------------------------
installed=$(find "$dest" ! -type d | wc -l)
step UNINST "make uninstall DESTDIR=$dest PREFIX=$PREFIX"
quiet inst_make uninstall
left=$(cd "$dest" && find . ! -type d | sed 's|^\./|/|')
[ -z "$left" ] || fail "make uninstall left these behind:"$'\n'"$left"
step UNINST "all $installed installed files removed"
step OK "install, pkg-config, C11/C99/C++17, shared and static, uninstall"
