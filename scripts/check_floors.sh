#!/bin/sh
# The floors of src/ (design §2 as amended in docs/design-amendments.md): every #include between
# folders points down, and no files call each other in a circle.
#
#   scripts/check_floors.sh [--src DIR] [--objs DIR]
#
# 1. Includes. A file in src/A may include src/B/... only when B is on a lower floor than A:
#      cli > plan > train > diffusion > model > parallel > optim > data > ops > core
#    (ops/cpu and ops/cuda belong to ops). Inside src/data the rooms are floors of their own:
#      prepare > loader > energon > synthetic > media > pack > formats
#    One exception, from the amendments: optim/ and parallel/ read model/params.h, the plain
#    description of the flat parameter buffer.
# 2. Circles. From the compiled objects under --objs (default build/src; `make` builds them): which
#    file defines each symbol (nm: T, D, B, R) and which files use it (U). A set of files that call
#    each other round in a circle is refused, naming the files and the symbols that tie them. There
#    is no exception: src/model's layers sit below the architectures that list them and the block
#    loop that runs them (docs/models.md "Adding an architecture").
#
# Prints one line per broken rule and ends with "N passed, N failed"; exit 1 when a rule is broken.
SRC=src
OBJS=build/src
while [ $# -gt 0 ]; do
    case $1 in
    --src) SRC=$2; shift 2 ;;
    --objs) OBJS=$2; shift 2 ;;
    *) echo "usage: $0 [--src DIR] [--objs DIR]" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/.." || exit 2
[ -d "$SRC" ] || { echo "check_floors: no source folder $SRC" >&2; exit 2; }

passed=0; failed=0

# ---- 1. includes ------------------------------------------------------------------------------
bad=$(find "$SRC" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cpp' \) | sort |
    xargs grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' |
    awk -v src="$SRC" '
    BEGIN {
        n = split("core ops data optim parallel model diffusion train plan cli", f, " ")
        for (i = 1; i <= n; i++) floor[f[i]] = i
        n = split("formats pack media synthetic energon loader prepare", r, " ")
        for (i = 1; i <= n; i++) room[r[i]] = i
    }
    # the folder of a path below src ("data/loader/x.h" -> "data", its room "loader")
    function top(p,    parts) { sub("^" src "/", "", p); split(p, parts, "/"); return parts[1] }
    function sub2(p,    parts) { sub("^" src "/", "", p); split(p, parts, "/"); return parts[2] }
    {
        file = $0; sub(/:.*/, "", file)
        inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
        if (inc !~ /\//) next                       # same folder
        from = top(file); to = top(src "/" inc)
        if (!(to in floor)) next                    # not a folder of src (a system or vendored path)
        if (!(from in floor)) { print file ": includes \"" inc "\" from an unknown folder " from; next }
        if (from == to) {
            if (from != "data") next
            ra = sub2(file); rb = sub2(src "/" inc)
            if (!(ra in room) || !(rb in room)) { print file ": data room unknown (" ra " -> " rb "): list it in scripts/check_floors.sh"; next }
            if (room[rb] > room[ra]) print file ": includes \"" inc "\", a data room above its own (" ra " < " rb ")"
            next
        }
        if ((from == "optim" || from == "parallel") && inc == "model/params.h") next
        if (floor[to] > floor[from]) print file ": includes \"" inc "\", a floor above its own (" from " < " to ")"
    }') || bad="the include check did not run (awk failed)"
if [ -n "$bad" ]; then
    echo "$bad" | sed 's/^/FAIL floors: /'
    failed=$((failed + 1))
else
    echo "ok   floors: every include between folders of $SRC points down"
    passed=$((passed + 1))
fi

# ---- 2. circles of calls ----------------------------------------------------------------------
if [ ! -d "$OBJS" ] || [ -z "$(find "$OBJS" -name '*.o' | head -1)" ]; then
    echo "FAIL circles: no objects under $OBJS (build first: make)"
    failed=$((failed + 1))
else
    # one line per (object, kind, symbol); the CPU ops' f64 twins define the f32 names again; an
    # object whose source is gone (left in the build folder after a move) is not read
    circles=$(find "$OBJS" -name '*.o' ! -name '*.f64.o' | sort | while read -r o; do
        stem=${o#"$OBJS"/}; stem=${stem%.o}; stem=${stem%.f32}; stem=${stem%.cu}
        [ -f "$SRC/$stem.c" ] || [ -f "$SRC/$stem.cu" ] || [ -f "$SRC/$stem.cpp" ] || continue
        nm "$o" 2>/dev/null | awk -v o="$o" '$1 == "U" { print o, "U", $2; next }
                                             $2 ~ /^[TDBR]$/ { print o, "D", $3 }'
    done | awk -v objs="$OBJS" '
    function name(o) { sub("^" objs "/", "", o); sub(/\.(f32\.|cu\.)?o$/, "", o); return o }
    $2 == "D" { def[$3] = name($1); next }
    { use[++nu] = name($1) SUBSEP $3 }
    END {
        # edges between files, with the symbols that make them
        for (i = 1; i <= nu; i++) {
            split(use[i], u, SUBSEP)
            if (!(u[2] in def) || def[u[2]] == u[1]) continue
            e = u[1] SUBSEP def[u[2]]
            if (!(e in why)) { adj[u[1]] = adj[u[1]] " " def[u[2]]; why[e] = u[2] }
            else if (length(why[e]) < 120 && index(" " why[e] ",", " " u[2] ",") == 0) why[e] = why[e] ", " u[2]
            node[u[1]]; node[def[u[2]]]
        }
        # reach[a,b]: b is reachable from a (a depth-first walk from every file)
        for (a in node) {
            top_ = 0; stack[++top_] = a
            while (top_ > 0) {
                x = stack[top_--]
                n = split(adj[x], nx, " ")
                for (k = 1; k <= n; k++) if (!((a, nx[k]) in reach)) { reach[a, nx[k]] = 1; stack[++top_] = nx[k] }
            }
        }
        # circles: the files that reach each other, grouped by their smallest member
        for (a in node) {
            if (!((a, a) in reach)) continue
            members = ""; lead = a
            for (b in node) if (((a, b) in reach) && ((b, a) in reach)) { members = members " " b; if (b < lead) lead = b }
            if (lead != a) continue
            n = split(members, m, " ")
            # sort the members for a stable message
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (m[j] < m[i]) { t = m[i]; m[i] = m[j]; m[j] = t }
            list = ""; for (i = 1; i <= n; i++) list = list (i > 1 ? " " : "") m[i]
            print "a circle of " n " files: " list
            for (i = 1; i <= n; i++) for (j = 1; j <= n; j++) if ((m[i], m[j]) in why)
                print "    " m[i] " -> " m[j] ": " why[m[i], m[j]]
        }
    }') || circles="the symbol check did not run (awk failed)"
    if [ -n "$circles" ]; then
        echo "$circles" | sed 's/^/FAIL circles: /'
        failed=$((failed + 1))
    else
        echo "ok   circles: no files call each other in a circle (objects under $OBJS)"
        passed=$((passed + 1))
    fi
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
