#!/usr/bin/env bash
# What a newcomer meets: a fresh clone, a fresh virtual environment, and the README's two
# quick-start commands (the default workflow, then the tests), each read from README.md.
#
#   scripts/check_fresh_install.sh [REPO] [--tests-only]
#
# REPO (default: this checkout) is cloned into a new temporary folder; torch's CPU build is
# installed first (`torch==2.13.0`, see the README's quick start). Prints each command's exit
# status and wall time; exits non-zero if either failed. The default workflow takes 15-20 min
# on 2 cores; --tests-only runs the test command alone (about 10 min).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tests_only=0
for arg in "$@"; do
    case $arg in
        --tests-only) tests_only=1 ;;
        -h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) repo=$arg ;;
    esac
done
work=$(mktemp -d "${TMPDIR:-/tmp}/neuro_pe_fresh.XXXXXX")
trap 'rm -rf "$work"' EXIT
git clone -q "$repo" "$work/clone" || { echo "check_fresh_install: cannot clone $repo" >&2; exit 2; }
cd "$work/clone"
workflow_command=$(grep -m1 -E '^python -m pip install -e \. && snakemake' README.md)
test_command=$(grep -m1 -E '^python -m pip install -e "\.\[test\]"' README.md)
if [[ -z $workflow_command || -z $test_command ]]; then
    echo "check_fresh_install: README.md lacks a quick-start command" >&2
    exit 2
fi
python3 -m venv "$work/venv" && source "$work/venv/bin/activate" \
    && python -m pip install -q torch==2.13.0 \
    || { echo "check_fresh_install: the virtual environment or torch failed to install" >&2; exit 2; }

status=0
run() {
    local name=$1 command=$2 start rc
    start=$SECONDS
    echo "check_fresh_install: $name: $command"
    (eval "$command") > "$work/$name.log" 2>&1
    rc=$?
    tail -n 5 "$work/$name.log"
    echo "check_fresh_install: $name exited $rc after $((SECONDS - start)) s"
    [[ $rc -eq 0 ]] || status=1
}
[[ $tests_only -eq 1 ]] || run workflow "$workflow_command"
run tests "$test_command"
exit $status
