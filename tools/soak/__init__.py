"""A fault-injection soak: a local sweep hit M times at random moments, resumed each time, checked at the end.

`scripts/soak_sweep.py` is the command line; `tests/lifecycle/test_sweep_signals.py` runs it small. What one
soak does:

1. the reference: the sweep of N short jobs (`seed=0..N-1` on the joblib launcher), uninterrupted;
2. the same sweep in another directory; M times, at a moment drawn uniformly from `delay_s` after the
   sweep (re)started (its upper end shrunk to 1.5 × the reference's wall time / M, so that on a fast
   machine the M faults still come before the sweep has finished), one fault: SIGINT, SIGTERM or SIGKILL, sent to the sweep's parent alone, to its
   process group, or to one job's process. After each fault the soak waits for the sweep to react and
   checks, from outside, what a user would: a signalled parent exits, no job process is alive 10 s later,
   no job process started after the signal, every job directory is consistent (no step twice or missing
   in metrics.jsonl up to its last row; an interrupted job's last.pt holds exactly its summary's steps);
   the fault is *survived* when all of that holds. Whenever the sweep is not running, the soak runs the
   sweep-resume command (the same command with `train.resume=auto`);
3. once M faults are in, the sweep is resumed until it exits 0, and every job is checked against the
   reference: completed, every step's row exactly once, and every row — losses, gradient norms, learning
   rates, validation losses — equal to the reference's bit for bit (`tokens_per_s` aside).

File faults come between two invocations, in place of a signal (`file_share` of them): a job's
metrics.jsonl cut in the middle of a row (the next `train.resume=auto` must train the missing rows again
from a checkpoint they cover), its newest checkpoint cut short or its tensor data damaged with the zip
index whole (auto must pass over it), a history splice (the job rewound from code to an older step
checkpoint A with `train.max_steps=A + ckpt_every` — another history, whose schedule ends there — and its
new last.pt cut short: auto must continue from A, never from the first history's step checkpoint the rewind
abandoned), or the continue command started twice at the same moment into the sweep directory (one runs,
the other is refused in one sentence without writing). A file fault is survived when no invocation ends a
job `failed` or `crashed` for it, no step is missing or repeated, and its job ends bit-identical to the
reference. More kinds come after the sweep: `concurrent_runs` pairs of single runs started together into
one fresh directory with different learning rates (one is refused having written nothing; the survivor's
`.hydra/` and summary carry its own lr); `after_end` signals (SIGINT or SIGTERM, once or twice, 0–1.5 s
after the line that ends it) alternately to job 0 run alone and to the finished sweep's continue command —
each must still exit 0, without a traceback, its run still `completed`; and, where a tmpfs can be mounted
(root), a full disk: job 0 alone on a small file system must end `failed` · 2 naming the file, then — the
file system grown — finish from its printed continue command bit-identical to the reference. Every
invocation's job directories are also checked for mislabelled configs (a job whose `.hydra/config.yaml` or
summary.json says another seed than its overrides).

`--launcher stacked` takes every fault too. A continued stacked sweep restacks its stacks as they were
(issue 39, point 8), so a stack that resumes whole ends bit for bit; a member that a fault sent back to
another step than its stack's trains in a stack of its own, equal to the uninterrupted member within float
tolerance but not bit for bit (a stack's batched arithmetic depends on the members it holds): such a job is
counted apart (`within_tolerance`, said in the result line) rather than failing the soak, and the full disk
is left out. `SoakSpec.stacked_bit_identical` (`--stacked-bit-identical`) demands bit-identity of every job.

Reported: N, M, faults survived (by kind), steps lost (steps missing from or repeated in the final
metrics.jsonl files, over all jobs), mislabelled configs, steps recomputed (training steps redone because a
SIGKILL came after the newest checkpoint: work lost, not results), jobs equal to the reference, and the wall
time.

Its parts: `processes` (the sweep's processes seen from outside, through /proc), `checks` (what the run
directories must hold after a fault and at the end), `spec` (what a soak runs, and the records of what it
found), `faults` (each kind of fault, sent or applied), `run` (the soak itself: `soak(spec)`). It is a
package beside the library (tools/ on the path), not in it: it attacks a checkout.
"""
