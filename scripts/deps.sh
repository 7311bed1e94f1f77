#!/usr/bin/env bash
# Installs what ringpipe needs to build and test (stress-ng: the CPU hogs
# of make test-under-load). As root it runs apt-get; otherwise it prints the
# exact command to run. Also restores the .NET interop project and the
# Aspire dashboard when the .NET SDK is present.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(gcc make pkg-config libcriterion-dev liburing-dev libbpf-dev libelf-dev
      zlib1g-dev libcurl4-openssl-dev clang llvm libclang-rt-14-dev bpftool unzip
      liblttng-ust-dev lttng-tools systemtap-sdt-dev bpftrace
      clickhouse-server clickhouse-client zookeeper stress-ng)

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ]; then
		echo "deps: installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -q >/dev/null
		apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
	else
		echo "deps: missing Debian packages. Run as root:" >&2
		echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
		exit 1
	fi
fi

if command -v dotnet >/dev/null 2>&1; then
	if [ -f tests/interop/TraceDump/TraceDump.csproj ] &&
	   [ ! -f tests/interop/TraceDump/obj/project.assets.json ]; then
		echo "deps: restoring the .NET interop project (TraceEvent)"
		dotnet restore -v q tests/interop/TraceDump >/dev/null
	fi
	# The traced target of the ps/collect interop tests (no packages needed).
	app=.output/interop-app/DotnetApp.dll
	if [ -f tests/interop/DotnetApp/DotnetApp.csproj ] &&
	   { [ ! -f "$app" ] ||
	     [ -n "$(find tests/interop/DotnetApp -maxdepth 1 -newer "$app" \( -name '*.cs' -o -name '*.csproj' \))" ]; }; then
		echo "deps: building the .NET test program (tests/interop/DotnetApp)"
		mkdir -p .output
		dotnet build -nologo -v q -c Release tests/interop/DotnetApp -o .output/interop-app \
			>.output/interop-app-build.log 2>&1 ||
			{ cat .output/interop-app-build.log >&2; exit 1; }
	fi
	# The Aspire dashboard, test_otlp's OTLP receiver (a self-contained
	# build inside the NuGet package; tests/aspire_node.h looks there).
	aspire="${NUGET_PACKAGES:-$HOME/.nuget/packages}/aspire.dashboard.sdk.linux-x64/13.6.5/tools/Aspire.Dashboard"
	if [ ! -x "$aspire" ]; then
		echo "deps: restoring the Aspire dashboard (NuGet Aspire.Dashboard.Sdk.linux-x64 13.6.5)"
		dotnet restore -v q tests/interop/AspireDashboard >/dev/null
		[ -f "$aspire" ] && chmod u+x "$aspire"
		[ -x "$aspire" ] && echo "deps: the Aspire dashboard is $aspire" ||
			echo "deps: $aspire is missing after the restore; test_otlp will fail" >&2
	fi
	# The .NET diagnostic tools, for interop checks of ringpipe's IPC server.
	tools=.output/dotnet-tools
	for t in dotnet-trace dotnet-counters dotnet-gcdump dotnet-stack; do
		if [ ! -x "$tools/$t" ]; then
			echo "deps: installing $t into $tools"
			dotnet tool install --tool-path "$tools" "$t" --version 10.0.750501 >/dev/null ||
				echo "deps: could not install $t; the checks that use it will be skipped" >&2
		fi
	done
else
	echo "deps: the .NET SDK (dotnet) is not installed; interop tests will be skipped" \
	     "(install dotnet-sdk-8.0 or later from Microsoft's Debian repository)" >&2
fi
