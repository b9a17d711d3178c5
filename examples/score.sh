#!/bin/sh
# A scorer for `--scorer-cmd`: the winning artifact's text arrives on stdin (and ORACLE_AUCTION,
# ORACLE_AGENT, ORACLE_ARTIFACT in the environment); print {"score": N, "reason": "..."} with N
# from 0 to 100. This one scores by length: 2 points per word, at most 100.
set -eu
words=$(wc -w | tr -d ' ')
score=$((words * 2))
if [ "$score" -gt 100 ]; then score=100; fi
printf '{"score": %d, "reason": "%d words"}\n' "$score" "$words"
