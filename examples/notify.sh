#!/bin/sh
# An oracle program for `--oracle-cmd`: oracle sends each new adjudication request as one JSON
# object on stdin and expects exit 0 once it is delivered. This one appends the request to
# `.oracle/notified.jsonl` (under the default home, which git ignores); a real one would page a
# person or open a ticket.
# Anything else (a non-zero exit) is a failed delivery, tried again next time.
set -eu
mkdir -p .oracle
cat >> .oracle/notified.jsonl
echo >> .oracle/notified.jsonl
