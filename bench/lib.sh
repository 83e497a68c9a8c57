# Host-side helpers shared by bench/run and bench/scale (bash, sourced).
#
# The guest prints one JSON object a line per (size, mode, backend), in the
# shape dma-bench --json writes:
#   {"backend": "stock", "mode": "thp", "gib": 1, "loops": 5, "map_s": [...],
#    "unmap_s": [...], "map_median_s": 0.0, "unmap_median_s": 0.0,
#    "pin_leak_pages": 0, "locked_vm_leak_pages": 0}
# These objects are flat and written by us, so awk reads them safely.

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH_DIR/.." && pwd -P)
# Every run's results go to build/bench/[<name>-]<UTC>.json/.png (not in
# git), and a run leaves the checkout as it was. bench/results/ keeps the
# *latest.* files the READMEs quote, and NOTES.md; only bench/publish
# (make bench-publish) replaces them, with a clean run on the reference
# setup (bench_reference), which bench_mark_reference marks as such.
RESULTS=$BENCH_DIR/results
RUNS=$REPO/build/bench

PROG=bench/${0##*/}
die() { echo "$PROG: $*" >&2; exit 2; }

# Common options; the environment (and so make variables) gives the defaults.
kernel=${KERNEL:-6.12}
loops=${LOOPS:-5}
backends=${BACKENDS:-stock,foliomap}
deterministic=${DETERMINISTIC:-0}
# The guest's emulated IOMMU (vm/run --iommu): intel (VT-d, the default) or
# amd (AMD-Vi) for an x86 guest, smmuv3 (the only one) for arm64: bench_arch.
iommu=${IOMMU:-}

is_number() { [[ $1 =~ ^[0-9]+([.][0-9]+)?$|^[.][0-9]+$ ]]; }

# bench_covers "HAVE" "WANT": every word of WANT is in HAVE.
bench_covers() {
	local w
	for w in $2; do
		[[ " $1 " == *" $w "* ]] || return 1
	done
}

# bench_reference "ITEMS" "DEFAULT ITEMS": is this a run on the reference
# setup (6.12, Intel IOMMU, both backends, foliomap's default pin_threads, at least the
# default modes/backings/sizes)? Only such a run replaces the *latest.*
# files the READMEs quote.
bench_reference() {
	[ "$kernel" = 6.12 ] && [ "$iommu" = intel ] && [ "$deterministic" = 0 ] && [ -z "${FOLIOMAP_PIN_THREADS:-}" ] &&
		bench_covers "${backends//,/ }" "stock foliomap" && bench_covers "$1" "$2"
}

# bench_mark_reference JSON NAME: the clean run JSON, on the reference
# setup, may become bench/results/NAME.json (NAME.png, ...): JSON.ref says
# so, and how.
bench_mark_reference() {
	echo "$2" > "$1.ref"
	echo "$PROG: a reference run: make bench-publish RUN=${1#"$REPO"/} makes it bench/results/$2.json"
}

# bench_arch: after krel is known, where the guest's programs are (TOOLS,
# TESTS_BIN; make -C tools KERNEL=... builds them for its architecture) and
# its IOMMU. An arm64 guest (6.12-arm64) runs the arm64 builds behind the virt
# machine's SMMUv3, the only IOMMU vm/run gives it.
bench_arch() {
	TOOLS=$REPO/tools TESTS_BIN=$REPO/tests/bin
	case "$krel" in
	*-arm64)
		TOOLS=$REPO/tools/arm64 TESTS_BIN=$REPO/tests/bin-arm64
		iommu=${iommu:-smmuv3}
		[ "$iommu" = smmuv3 ] || die "IOMMU '$iommu': an arm64 guest has an SMMUv3 (smmuv3)" ;;
	*)
		iommu=${iommu:-intel}
		case "$iommu" in intel|amd) ;; *) die "IOMMU '$iommu': intel or amd" ;; esac ;;
	esac
}

# bench_check_setup SIZES: validate options, resolve the kernel, check builds.
bench_check_setup() {
	local s v
	for s in $1; do
		is_number "$s" || die "size '$s' is not a number of GiB"
	done
	[[ $loops =~ ^[1-9][0-9]*$ ]] || die "LOOPS '$loops' is not a positive integer"
	case "$backends" in
	stock|foliomap|stock,foliomap|foliomap,stock) ;;
	*) die "BACKENDS '$backends': stock, foliomap or stock,foliomap" ;;
	esac
	case "$deterministic" in 0|1) ;; *) die "DETERMINISTIC must be 0 or 1" ;; esac
	[[ ${FT_MIB:-512} =~ ^[1-9][0-9]*$ ]] || die "FT_MIB '$FT_MIB' is not a positive integer (MiB)"
	[[ ${FOLIOMAP_PIN_THREADS:-0} =~ ^-?[0-9]+$ ]] ||
		die "FOLIOMAP_PIN_THREADS '$FOLIOMAP_PIN_THREADS' is not an integer"
	[ -x "$REPO/vm/run" ] || die "vm/run missing"
	krel=$("$REPO/vm/kver" "$kernel") || die "no Debian $kernel kernel installed: make deps KERNEL=$kernel"
	bench_arch
	[ -x "$TOOLS/dma-bench" ] || make -s -C "$REPO/tools" KERNEL="$kernel" >&2 ||
		die "cannot build ${TOOLS#"$REPO"/}/dma-bench"
	if [[ $backends == *foliomap* ]]; then
		local ko=$REPO/kmod/foliomap.ko
		[ -f "$ko" ] || die "$ko not built: make module KERNEL=$kernel (or BACKENDS=stock to measure stock alone)"
		v=$(modinfo -F vermagic "$ko" 2>/dev/null | awk '{print $1}')
		[ "$v" = "$krel" ] || die "$ko is built for '${v:-?}', the guest runs $krel: make module KERNEL=$kernel"
	fi
	command -v gnuplot >/dev/null || echo "$PROG: gnuplot missing (vm/install-deps installs gnuplot-nox): no plot" >&2
}

# bench_guest OUT MAXGIB GUEST-BENCH-ARGS...: one guest, JSON lines into OUT.
# Guest memory: three times the largest buffer plus 3 GiB (buffer, hugetlb
# pool being returned, page tables and the kernel).
bench_guest() {
	local out=$1 max=$2 mem det=() rig=() env=()
	shift 2
	mem=$(awk -v g="$max" 'BEGIN { m = g * 3 + 3; printf "%d", (m == int(m)) ? m : int(m) + 1 }')
	[ "$deterministic" = 1 ] && det=(--deterministic)
	# Modes bar and bar-Ng map device memory: an ivshmem-plain BAR of
	# BAR_SIZE (256M), or as big as the largest bar-Ng (never touched by
	# the host: vm/run), whose first 256 MiB are mode bar's.
	local bar_size=${BAR_SIZE:-256M} m g
	for m in ${modes:-}; do
		[[ $m =~ ^bar-([0-9]+)g$ ]] || continue
		g=${BASH_REMATCH[1]}
		[[ $bar_size == *G ]] && [ "${bar_size%G}" -ge "$g" ] || bar_size=${g}G
		rig=(--ivshmem "$bar_size")
	done
	[[ " ${modes:-} " != *" bar "* ]] || rig=(--ivshmem "$bar_size")
	# 1G-page modes (huge1g=1: the matrix's ft-*1g rows): the pages
	# reserved at boot, on top of the rest.
	if [ "${huge1g:-0}" = 1 ] || [[ " ${modes:-} " == *" hugetlb1g "* ||
				       " ${modes:-} " == *" memfd1g "* ]]; then
		g=$(awk -v g="$max" 'BEGIN { printf "%d", (g == int(g)) ? g : int(g) + 1 }')
		rig+=(--hugepages-1g "$g")
		mem=$((mem + g))
	elif [[ " ${modes:-} " == *" alias1g "* ]]; then
		rig+=(--hugepages-1g 1)
		mem=$((mem + 1))
	fi
	# alias1g: up to a terabyte of IOVA from 4 GiB on, beyond the
	# emulated IOMMU's default 39 bits (512 GiB).
	[[ " ${modes:-} " != *" alias1g "* ]] || rig+=(--aw-bits 48)
	case "$iommu" in intel|smmuv3) ;; *) rig+=(--iommu "$iommu") ;; esac
	# foliomap's helper threads (bench/switch-backend sets them): 0 is off.
	[ -z "${FOLIOMAP_PIN_THREADS:-}" ] || env=(--env "FOLIOMAP_PIN_THREADS=$FOLIOMAP_PIN_THREADS")
	# The matrix's first-touch size in MiB (matrix-bench's default: 512).
	[ -z "${FT_MIB:-}" ] || env+=(--env "FT_MIB=$FT_MIB")
	# Loops of the bar-Ng rows (guest-bench's default: 3).
	[ -z "${BIG_LOOPS:-}" ] || env+=(--env "BIG_LOOPS=$BIG_LOOPS")
	# The latency probe's period in us (bench/latency; guest-bench: 500).
	[ -z "${LATENCY_US:-}" ] || env+=(--env "LATENCY_US=$LATENCY_US")
	echo "$PROG: guest $krel, $iommu IOMMU, ${mem}G, backends $backends, loops $loops${det:+, deterministic}" >&2
	"$REPO/vm/run" --kernel "$kernel" --backend stock --mem "${mem}G" --share "$REPO" \
		"${det[@]}" "${rig[@]}" "${env[@]}" -- "$REPO/bench/guest-bench" --loops "$loops" \
		--backends "$backends" "$@" > "$out"
}

# The result lines of the guest's stdout (anything else is ignored).
bench_lines() { tr -d '\r' < "$1" | grep '^{"backend": ' || true; }

# awk helpers: jstr(line, key), jnum(line, key).
AWK_JSON='
function jstr(l, k,  m) { if (match(l, "\"" k "\": \"[^\"]*\"")) { m = substr(l, RSTART, RLENGTH); sub(/^[^:]*: "/, "", m); sub(/"$/, "", m); return m } return "" }
function jnum(l, k,  m) { if (match(l, "\"" k "\": -?[0-9.eE+-]+")) { m = substr(l, RSTART, RLENGTH); sub(/^[^:]*: /, "", m); return m + 0 } return "" }
'

# Pages leaked over all lines (pins + locked), for the exit status.
bench_leaks() {
	awk "$AWK_JSON"'{ n += jnum($0, "pin_leak_pages") + jnum($0, "locked_vm_leak_pages") } END { print n + 0 }' "$1"
}

# The PNG terminal gnuplot-nox has: pngcairo, else libgd png.
gnuplot_term() {
	if echo 'set terminal' | gnuplot 2>&1 | grep -qw pngcairo; then
		echo "pngcairo enhanced font ',10'"
	else
		echo "png"
	fi
}

utc_stamp() { date -u +%Y%m%dT%H%M%SZ; }

# ---- the workload matrix (tools/matrix-bench --json lines) ----
# {"row": "small-4k", "metric": "map", "unit": "us", "guard": 1, "backend":
#  "stock", "loops": 10, "values": [...], "median": 0.0, "pin_leak_pages": 0,
#  "locked_vm_leak_pages": 0, "failures": 0, "what": "..."}

matrix_lines() { tr -d '\r' < "$1" | grep '^{"row": ' || true; }

# Per row/metric, in order: "row/metric unit guard stock foliomap loops failed what".
AWK_MATRIX='
{
	k = jstr($0, "row") "/" jstr($0, "metric"); b = jstr($0, "backend")
	if (!(k in seen)) { seen[k]; o[++n] = k; unit[k] = jstr($0, "unit"); what[k] = jstr($0, "what") }
	guard[k] = jnum($0, "guard"); med[k, b] = jnum($0, "median"); lp[k] = jnum($0, "loops")
	bad[k] += jnum($0, "failures") + jnum($0, "pin_leak_pages") + jnum($0, "locked_vm_leak_pages")
}
function ratio(k) { return (med[k, "stock"] != "" && med[k, "foliomap"] > 0) ? med[k, "stock"] / med[k, "foliomap"] : "" }
'

# matrix_ratios FILE: "row/metric ratio" for each guarded metric with both backends.
matrix_ratios() {
	awk "$AWK_JSON$AWK_MATRIX"'END { for (i = 1; i <= n; i++) { k = o[i]; r = ratio(k)
		if (guard[k] && r != "") printf "%s %.4f\n", k, r } }' "$1"
}

matrix_table() {  # matrix_table FILE [HOW, e.g. "deterministic, 3 loops"]
	[ -s "$1" ] || return 0
	awk -v how="${2:-}" "$AWK_JSON$AWK_MATRIX"'
	function t(v) { return v == "" ? "-" : (v >= 100 ? sprintf("%.1f", v) : sprintf("%.4g", v)) }
	END {
		printf "\nworkload matrix%s: medians, ratio = stock / foliomap (> 1: foliomap faster)\n\n", how == "" ? "" : " (" how ")"
		printf "%-24s %4s %10s %10s %8s %5s\n", "row/metric", "unit", "stock", "foliomap", "ratio", "loops"
		for (i = 1; i <= n; i++) {
			k = o[i]; r = ratio(k)
			printf "%-24s %4s %10s %10s %8s %5s%s%s\n", k, unit[k], t(med[k, "stock"]), t(med[k, "foliomap"]),
				r == "" ? "-" : sprintf("%.2fx", r), lp[k], guard[k] ? "" : "  (not guarded)",
				bad[k] ? "  LEAK/FAILED" : ""
		}
		printf "\nrows:\n"
		for (i = 1; i <= n; i++) { split(o[i], p, "/"); if (!(p[1] in shown)) { shown[p[1]]; printf "  %-14s %s\n", p[1], what[o[i]] } }
	}' "$1"
}

# matrix_plot FILE PNG SUBTITLE: one bar per row/metric, the ratio (log scale).
matrix_plot() {
	command -v gnuplot >/dev/null || return 0
	awk "$AWK_JSON$AWK_MATRIX"'END { for (i = 1; i <= n; i++) { r = ratio(o[i]); if (r != "") printf "%s %.4f %d\n", o[i], r, guard[o[i]] } }' \
		"$1" > "$1.plot"
	[ -s "$1.plot" ] || return 0
	gnuplot <<-GP || echo "$PROG: gnuplot failed, no matrix plot" >&2
		set terminal $(gnuplot_term) size 1200,520
		set output '$2'
		set title "Workload matrix: stock / foliomap (above 1: foliomap faster), $3 (TCG guest)"
		set logscale y
		set grid ytics mytics
		set ylabel 'ratio stock / foliomap (median, log scale)'
		set xtics rotate by -40 font ',9' nomirror
		set style fill solid 0.8 border -1
		set boxwidth 0.7
		set xrange [-0.7:*]
		set arrow from graph 0, first 1 to graph 1, first 1 nohead lc rgb '#404040'
		set arrow from graph 0, first ${guard:-0.95} to graph 1, first ${guard:-0.95} nohead dt 2 lc rgb '#c03030'
		set bmargin 7
		set rmargin 8
		plot '$1.plot' using 0:2:(\$3 == 0 ? 0x9f9f9f : (\$2 < ${guard:-0.95} ? 0xc03030 : 0xe07020)):xtic(1) with boxes lc rgb variable notitle, \
		     '' using 0:2:(sprintf('%.2f', \$2)) with labels offset 0,0.7 font ',8' notitle
	GP
}
