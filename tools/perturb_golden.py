#!/usr/bin/env python3
"""Copy a golden-logits JSONL file, raising the largest logit of the last
position of sequence SEQ by 2.0 (enough to change that token's distribution
well past any KL threshold the logit-check tests use).

usage: perturb_golden.py IN OUT SEQ"""
import json
import sys

src, dst, seq = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = [json.loads(l) for l in open(src)]
row = lines[seq]["logits"][-1]
row[row.index(max(row))] += 2.0
with open(dst, "w") as f:
    for l in lines:
        f.write(json.dumps(l) + "\n")
