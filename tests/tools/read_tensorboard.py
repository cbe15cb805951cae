#!/usr/bin/env python3
"""Dumps every TensorBoard scalar under a folder as JSON, read with the
tensorboard package's own EventAccumulator (not ctitan's code), so a test can
compare ctitan's event files with its metrics.jsonl.

usage: read_tensorboard.py FOLDER
prints {"<run folder relative to FOLDER>": {"<tag>": [[step, value], ...]}, ...}
where a run folder is each folder holding events.out.tfevents.* files
("." for FOLDER itself). EventAccumulator stops quietly at a record whose
CRC is wrong, so every file is first read to its end with tensorboard's
record reader: a bad or truncated record exits 1 with one line on stderr.
"""
import json
import os
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow


def check_records(path):
    reader = pywrap_tensorflow.PyRecordReader_New(path)
    count = 0
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return count
        except errors.DataLossError as e:
            raise SystemExit(f"{path}: record {count}: {e.message}")
        count += 1


def read_run(folder):
    # size_guidance 0: keep every scalar (the default samples 10,000).
    acc = event_accumulator.EventAccumulator(folder, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: read_tensorboard.py FOLDER\n")
        return 2
    root = argv[1]
    runs = {}
    for folder, _, files in sorted(os.walk(root)):
        events = [f for f in files if ".tfevents." in f]
        for f in events:
            check_records(os.path.join(folder, f))
        if events:
            runs[os.path.relpath(folder, root)] = read_run(folder)
    if not runs:
        sys.stderr.write(f"no events.out.tfevents.* files under {root}\n")
        return 1
    json.dump(runs, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
