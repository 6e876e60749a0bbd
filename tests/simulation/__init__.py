"""Deterministic simulation of the whole coordinator (issue 9; docs/simulation.md).

clock.py      virtual-time asyncio loop, the coordinator's wall clock
disk.py       simulated disk under the real storage layer; executors at virtual times
network.py    simulated network: loss, delay, duplication, reordering, partitions
members.py    simulated consumer / connect / classic members (the SDK's state machines)
invariants.py safety invariants (after every event) and the liveness check
faults.py     swarm fault mixes and the fault injector
runner.py     one world per seed: build, run, report
__main__.py   `python -m tests.simulation --seeds 500 [--seed N] [--long] [--liveness]`
"""
