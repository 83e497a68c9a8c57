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
RESULTS=$BENCH_DIR/results

PROG=bench/${0##*/}
die() { echo "$PROG: $*" >&2; exit 2; }

# Common options; the environment (and so make variables) gives the defaults.
kernel=${KERNEL:-6.12}
loops=${LOOPS:-5}
backends=${BACKENDS:-stock,foliomap}
deterministic=${DETERMINISTIC:-0}

is_number() { [[ $1 =~ ^[0-9]+([.][0-9]+)?$|^[.][0-9]+$ ]]; }

# bench_covers "HAVE" "WANT": every word of WANT is in HAVE.
bench_covers() {
	local w
	for w in $2; do
		[[ " $1 " == *" $w "* ]] || return 1
	done
}

# bench_reference "ITEMS" "DEFAULT ITEMS": is this a run on the reference
# setup (6.12, both backends, at least the default modes/backings/sizes)?
# Only such a run replaces the *latest.* files the READMEs quote.
bench_reference() {
	[ "$kernel" = 6.12 ] && [ "$deterministic" = 0 ] &&
		bench_covers "${backends//,/ }" "stock foliomap" && bench_covers "$1" "$2"
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
	[ -x "$REPO/vm/run" ] || die "vm/run missing"
	krel=$("$REPO/vm/kver" "$kernel") || die "no Debian $kernel kernel installed: make deps KERNEL=$kernel"
	[ -x "$REPO/tools/dma-bench" ] || make -s -C "$REPO/tools" >&2 || die "cannot build tools/dma-bench"
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
	local out=$1 max=$2 mem det=()
	shift 2
	mem=$(awk -v g="$max" 'BEGIN { m = g * 3 + 3; printf "%d", (m == int(m)) ? m : int(m) + 1 }')
	[ "$deterministic" = 1 ] && det=(--deterministic)
	# Mode bar maps device memory: an ivshmem-plain BAR of BAR_SIZE (256M).
	[[ " ${modes:-} " != *" bar "* ]] || det+=(--ivshmem "${BAR_SIZE:-256M}")
	echo "$PROG: guest $krel, ${mem}G, backends $backends, loops $loops${det:+, deterministic}" >&2
	"$REPO/vm/run" --kernel "$kernel" --backend stock --mem "${mem}G" --share "$REPO" \
		"${det[@]}" -- "$REPO/bench/guest-bench" --loops "$loops" \
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
