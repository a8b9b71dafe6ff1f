"""A deterministic storage simulator: throughput as a function of the knobs.

It knows knobs and numbers only (``outstanding_requests``, ``read_size``, and
optionally ``engine`` and ``direct``), so tests and benchmarks can run the
tuner for thousands of simulated seconds in a fraction of a real one.

The model, per request of ``R`` bytes with ``N`` requests in flight:

* service time ``latency + R / stream_bandwidth`` (time to first byte, then
  one request's own transfer rate: a TCP window over a round trip, or one
  queue of a device);
* a concurrency curve: the storage serves ``parallelism * (1 - exp(-N /
  parallelism))`` requests at once (linear for few, saturating at its
  internal parallelism), so by Little's law it moves that many times ``R``
  per service time;
* caps: the link or device ``bandwidth``, and ``R / request_overhead`` (the
  client's CPU time per request: syscalls, or HTTP handling);
* loss past ``inflight_knee`` bytes in flight: ``1 + inflight_loss`` times
  slower for every doubling past it (queueing and drops behind a shaped
  link, page-cache and memory pressure locally);
* noise: every tick's rate times ``1 + noise * gauss`` from a seeded
  generator, and after each change a ramp of about one service time while
  the new requests fill the pipe (the warm-up a tuner must discard).

The caps combine as a smooth minimum, as real systems approach a limit
gradually rather than at a corner. :meth:`StorageSimulator.switch` changes
the profile mid-run (a storage that gets busier, or a job that moves).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["PROFILES", "SimulatedRun", "StorageProfile", "StorageSimulator", "drive"]

KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True)
class StorageProfile:
    """Numbers that describe one storage as the reader sees it (SI bytes/s)."""

    name: str
    latency: float
    """Seconds from issuing a request to its first byte."""
    bandwidth: float
    """Bytes/s the device or link moves at most."""
    stream_bandwidth: float
    """Bytes/s one request moves by itself once started."""
    parallelism: float
    """Requests the storage serves at once before they queue."""
    request_overhead: float
    """Client CPU seconds per request."""
    inflight_knee: float
    """Bytes in flight past which throughput is lost."""
    inflight_loss: float
    """Slowdown per doubling of bytes in flight past the knee."""
    noise: float = 0.03
    """Relative standard deviation of a tick's rate."""
    threads_overhead: float = 2.0
    """``engine="threads"``: request overhead times this (a pool hand-off per read)."""
    buffered_copy_bandwidth: float = math.inf
    """``direct=False``: bytes/s of the page-cache copy (a cap); inf for remote."""

    def rate(self, config: Mapping[str, Any]) -> float:
        """Noise-free bytes/s at ``config`` in steady state."""
        requests = int(config["outstanding_requests"])
        size = int(config["read_size"])
        overhead = self.request_overhead
        if config.get("engine") == "threads":
            overhead *= self.threads_overhead
        service = self.latency + size / self.stream_bandwidth
        serving = self.parallelism * (1.0 - math.exp(-requests / self.parallelism))
        caps = [serving * size / service, self.bandwidth, size / overhead]
        if not config.get("direct", False):  # buffered, the reader's default
            caps.append(self.buffered_copy_bandwidth)
        rate: float = sum(cap**-4.0 for cap in caps) ** -0.25
        excess = requests * size / self.inflight_knee
        if excess > 1.0:
            rate /= 1.0 + self.inflight_loss * math.log2(excess)
        return rate

    def service_time(self, config: Mapping[str, Any]) -> float:
        return self.latency + int(config["read_size"]) / self.stream_bandwidth


# The profiles. Each docstring-like comment gives the reasoning behind its numbers.
# fmt: off
PROFILES: dict[str, StorageProfile] = {
    # A datacenter NVMe SSD (PCIe 3 x4 class): ~3 GB/s sequential, ~80 us to
    # first byte, one 1 MiB request streams at ~2.5 GB/s by itself, so one
    # 1 MiB request is nearly enough and ~8 in flight saturate it (internal
    # parallelism ~8 channels). io_uring costs ~15 us of CPU per request;
    # buffered reads pay a page-cache copy (~4 GB/s for one thread). Too much in
    # flight (past 128 MiB) evicts the data just read ahead (memory pressure).
    "nvme": StorageProfile(
        "nvme",
        latency=80e-6,
        bandwidth=3.0e9,
        stream_bandwidth=2.5e9,
        parallelism=8,
        request_overhead=15e-6,
        inflight_knee=128 * MiB,
        inflight_loss=0.15,
        noise=0.03,
        buffered_copy_bandwidth=4.0e9,
    ),
    # A 7200 rpm disk: ~180 MB/s on the outer tracks, ~4 ms to position the
    # head between requests of different shards (half a rotation plus short
    # seeks), one actuator (NCQ reordering gives a little more than one request
    # at a time: parallelism 1.5). Large reads amortize the positioning; many
    # large reads in flight (past 32 MiB) make the head thrash between files.
    "hdd": StorageProfile(
        "hdd",
        latency=4e-3,
        bandwidth=180e6,
        stream_bandwidth=180e6,
        parallelism=1.5,
        request_overhead=20e-6,
        inflight_knee=32 * MiB,
        inflight_loss=0.3,
        noise=0.05,
        buffered_copy_bandwidth=4.0e9,
    ),
    # An object store 20 ms away behind a 1 Gbit/s link (125 MB/s). One request
    # streams at ~40 MB/s (a ~0.8 MiB TCP window per 20 ms round trip), so a
    # 1 MiB read takes 20 + 26 ms and 1 MiB x 16 in flight, or 4 MiB x 4, fill
    # the link; HTTP handling costs ~150 us of CPU per request. More than
    # ~24 MiB in flight overflows the link's queue: drops, and TCP backs off.
    "remote-1gbit": StorageProfile(
        "remote-1gbit",
        latency=20e-3,
        bandwidth=125e6,
        stream_bandwidth=40e6,
        parallelism=256,
        request_overhead=150e-6,
        inflight_knee=24 * MiB,
        inflight_loss=0.15,
        noise=0.05,
    ),
    # The same store without the cap: a 10 Gbit/s NIC (1.25 GB/s). It takes
    # ~60 MB in flight to fill (bandwidth x service time), so under a memory
    # budget the best point trades request size (overhead) against depth.
    "remote-uncapped": StorageProfile(
        "remote-uncapped",
        latency=20e-3,
        bandwidth=1.25e9,
        stream_bandwidth=40e6,
        parallelism=256,
        request_overhead=150e-6,
        inflight_knee=256 * MiB,
        inflight_loss=0.15,
        noise=0.05,
    ),
}
# fmt: on


class StorageSimulator:
    """Ticks of simulated traffic at the configuration in force.

    ``apply(config)`` changes the knobs (starting a warm-up ramp);
    ``tick()`` advances the clock by ``tick_seconds`` and returns the bytes
    delivered in that tick. Same seed, same calls: same numbers.
    """

    def __init__(
        self, profile: StorageProfile | str, *, seed: int = 0, tick_seconds: float = 0.1
    ) -> None:
        self.profile = PROFILES[profile] if isinstance(profile, str) else profile
        self.tick_seconds = tick_seconds
        self.clock = 0.0
        self._random = random.Random(seed)
        self._config: dict[str, Any] | None = None
        self._changed_at = 0.0

    @property
    def config(self) -> dict[str, Any] | None:
        return None if self._config is None else dict(self._config)

    def apply(self, config: Mapping[str, Any]) -> None:
        if self._config != dict(config):
            self._config = dict(config)
            self._changed_at = self.clock

    def switch(self, profile: StorageProfile | str, **changes: Any) -> None:
        """From now on behave as ``profile`` (with field ``changes``)."""
        chosen = PROFILES[profile] if isinstance(profile, str) else profile
        self.profile = replace(chosen, **changes) if changes else chosen

    def tick(self) -> tuple[int, float]:
        """``(bytes, seconds)`` delivered over the next tick."""
        if self._config is None:
            raise RuntimeError("apply a configuration before the first tick")
        profile = self.profile
        start = self.clock - self._changed_at
        ramp = 2.0 * profile.service_time(self._config)
        # The share of the tick the pipe was full: the integral of 1 - exp(-t/ramp).
        end = start + self.tick_seconds
        filled = self.tick_seconds - ramp * (math.exp(-start / ramp) - math.exp(-end / ramp))
        noise = profile.noise * self._random.gauss(0.0, 1.0)
        rate = profile.rate(self._config) * max(0.0, 1.0 + noise)
        self.clock += self.tick_seconds
        return round(rate * filled), self.tick_seconds

    def best(self, space_grid: list[dict[str, Any]]) -> tuple[dict[str, Any], float]:
        """The grid point with the highest noise-free rate, and that rate."""
        rated = [(self.profile.rate(config), index) for index, config in enumerate(space_grid)]
        rate, index = max(rated)
        return space_grid[index], rate


@dataclass
class SimulatedRun:
    """What a policy did on a simulator: every window, and all traffic."""

    windows: list[dict[str, Any]]
    """Per window: ``clock`` (s), ``config``, measured ``rate``, noise-free
    ``true_rate``, ``bytes`` and ``seconds`` since the previous window
    (warm-up included), and the ``profile``."""
    total_bytes: int = 0
    total_seconds: float = 0.0

    def mean_rate(self, first: int = 0, last: int | None = None) -> float:
        """Delivered bytes/s over windows ``first``..``last`` (warm-ups included)."""
        chosen = self.windows[first:last]
        seconds = sum(w["seconds"] for w in chosen)
        return sum(w["bytes"] for w in chosen) / seconds if seconds else 0.0


def drive(policy: Any, simulator: StorageSimulator, windows: int,
          switch_at: int | None = None, switch_to: StorageProfile | str | None = None,
          ) -> SimulatedRun:  # fmt: skip
    """Run ``policy`` (an :class:`~fastio.tuners.OnlineTuner` or a baseline
    whose ``apply`` is ``simulator.apply``) for ``windows`` windows of
    simulated traffic; after window ``switch_at`` the storage becomes
    ``switch_to``."""
    policy.start()
    run = SimulatedRun([])
    bytes_since, seconds_since = 0, 0.0
    while len(run.windows) < windows:
        config = dict(policy.config)
        nbytes, seconds = simulator.tick()
        bytes_since += nbytes
        seconds_since += seconds
        run.total_bytes += nbytes
        run.total_seconds += seconds
        result = policy.observe(nbytes, seconds)
        if result is None:
            continue
        rate = result if isinstance(result, float) else result.rate
        run.windows.append({
            "clock": simulator.clock, "config": config, "rate": rate,
            "true_rate": simulator.profile.rate(config), "bytes": bytes_since,
            "seconds": seconds_since, "profile": simulator.profile.name,
        })  # fmt: skip
        bytes_since, seconds_since = 0, 0.0
        if switch_at is not None and len(run.windows) == switch_at and switch_to is not None:
            simulator.switch(switch_to)
    return run
