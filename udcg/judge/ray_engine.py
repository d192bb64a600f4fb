"""Judge calls on Ray actors (the ``ray`` extra): :class:`RayJudge`, described in docs/scale.md.
Pieces of ``piece_size`` items go over an ActorPool and are taken as they finish, each into its
place in the output; only the driver sees results (one cache writer). Ray is never shut down,
nor imported on import here.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import weakref
from collections import deque
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from itertools import cycle, islice
from pathlib import Path
from typing import Any

from udcg.errors import UDCGInputError, UDCGServiceError
from udcg.io.files import STDIO, is_regular_file
from udcg.judge.base import Judge, OnResult
from udcg.judge.options import check_options, load_judge
from udcg.judge.requests import Request, Result
from udcg.judge.spec import EMBEDDED, OPENAI, PRECOMPUTED, judge_key, split_openai
from udcg.validation import nonnegative_float, nonnegative_int, one_of, positive_int, show

#: How judge calls run: in this process, or on Ray actors.
ENGINES = ("local", "ray")


@dataclass(frozen=True)
class RayOptions:
    """Where and how :class:`RayJudge` runs: cluster ``address`` (None: this process's Ray,
    else a local one), actors (None: cluster GPUs / ``gpus_per_worker``, else CPUs), GPUs per
    actor, a pool of servers of one deployment (round-robin over actors; openai judges),
    items per piece (None: 8, and for an openai judge a call's items over its actors' slots,
    so each actor's window of requests stays full), pieces queued per actor, restarts per
    actor, seconds to start."""

    address: str | None = None
    workers: int | None = None
    gpus_per_worker: float = 0.0
    servers: tuple[str, ...] = ()
    piece_size: int | None = None
    in_flight: int = 2
    max_restarts: int = 3
    start_timeout: float = 300.0


def ray_options(values: Mapping[str, Any], prefix: str = "") -> RayOptions:
    """:class:`RayOptions` from a mapping, checked; errors name the field ``prefix`` + name."""

    def fail(message: str, name: str = "") -> UDCGInputError:
        return UDCGInputError(message, field=f"{prefix}{name}".rstrip("."))

    if not isinstance(values, Mapping):
        raise fail(f"must be a mapping of Ray options, got {show(values)}")
    fields = RayOptions.__dataclass_fields__
    for key in values:
        if key not in fields:
            raise fail(f"not a Ray option; the options: {', '.join(fields)}", key)
    got = {**{k: f.default for k, f in fields.items()}, **values}
    address, servers = got["address"], got["servers"]
    if address is not None:
        if not (isinstance(address, str) and address.strip()):
            raise fail(f"must be a cluster address, got {show(address)}", "address")
        if address.strip().startswith("ray://") and not importlib.util.find_spec("grpc"):
            message = f"{address} is reached through the Ray client, which is not installed: "
            raise fail(message + 'pip install "ray[client]"', "address")
    if got["workers"] is not None:
        positive_int(got["workers"], f"{prefix}workers")
    if isinstance(servers, str) or not isinstance(servers, Sequence):
        raise fail(f"must be a list of URLs, got {show(servers)}", "servers")
    for i, url in enumerate(servers):
        if not (isinstance(url, str) and url.strip()):
            raise fail(f"must be a URL, got {show(url)}", f"servers[{i}]")
    if got["piece_size"] is not None:
        positive_int(got["piece_size"], f"{prefix}piece_size")
    positive_int(got["in_flight"], f"{prefix}in_flight")
    nonnegative_int(got["max_restarts"], f"{prefix}max_restarts")
    timeout = nonnegative_float(got["start_timeout"], f"{prefix}start_timeout")
    if not timeout > 0:
        raise fail("must be > 0, got 0", "start_timeout")
    gpus = nonnegative_float(got["gpus_per_worker"], f"{prefix}gpus_per_worker")
    return RayOptions(
        **{**got, "gpus_per_worker": gpus, "servers": tuple(servers), "start_timeout": timeout}
    )


def engine_options(
    engine: str, values: Mapping[str, Any], prefix: str = "ray."
) -> RayOptions | None:
    """The Ray options for ``engine``, checked (None for ``local``).

    >>> engine_options("ray", {"workers": 2, "servers": ["http://gpu-0:8000/v1"]}).servers
    ('http://gpu-0:8000/v1',)
    """
    one_of(engine, "engine", ENGINES)
    options = ray_options(values, prefix)
    return None if engine == "local" else options


def worker_specs(
    spec: str, options: Mapping[str, Any], servers: Sequence[str]
) -> list[tuple[str, dict[str, Any]]]:
    """(spec, options) per worker kind: an openai spec once per server, ``server_id`` (unless
    set) the spec's URL so fingerprints match the single-process judge; local paths absolute;
    a piped precomputed file is refused (each worker would open it again)."""
    if servers and not spec.startswith(OPENAI):
        raise UDCGInputError(
            "a pool of servers needs an openai:MODEL@BASE_URL judge", field="servers"
        )
    if spec.startswith(OPENAI):
        from udcg.judge.openai_http import split_base_url

        model, base_url = split_openai(spec)
        pinned = {"server_id": split_base_url(base_url)[0], **options}
        return [(f"{OPENAI}{model}@{url}", pinned) for url in servers] or [(spec, dict(options))]
    prefix = PRECOMPUTED if spec.startswith(PRECOMPUTED) else ""
    path = Path(spec.removeprefix(prefix)).expanduser()
    if prefix and (str(path) == STDIO or (path.exists() and not is_regular_file(path))):
        raise UDCGInputError(
            f"{path} is not a regular file, and each Ray worker opens the precomputed file "
            "again: give a file",
            field="judge",
        )
    if prefix or (spec != EMBEDDED and path.exists()):
        spec = prefix + str(path.resolve())
    return [(spec, dict(options))]


class JudgeWorker:
    """A Ray actor's body: one judge; a failure to build it is raised by :meth:`identity`."""

    def __init__(self, spec: str, name: str, options: Mapping[str, Any]) -> None:
        self.judge: Any = None
        self.error: Exception | None = None
        try:
            self.judge = load_judge(spec, name, **options)
        except Exception as exc:
            self.error = exc

    def identity(self) -> tuple[str, str, int]:
        """``(name, fingerprint, process id)`` of the judge, probed."""
        if self.judge is None:
            raise self.error or RuntimeError("no judge")
        self.judge.probe()
        return self.judge.name, self.judge.fingerprint, os.getpid()

    def key_settings(self, operation: str) -> dict[str, Any]:
        return self.judge.key_settings(operation)

    def batch_settings(self, operations: list[str] | None) -> dict[str, Any]:
        return self.judge.batch_settings(operations)

    def max_passage_tokens(self) -> int | None:
        return getattr(self.judge, "max_passage_tokens", None)

    def cut_passages(self) -> frozenset[bytes]:
        return getattr(self.judge, "cut_passages", frozenset())

    def run(self, requests: Sequence[Request], start: int) -> tuple[int, list[Result]]:
        """The results of ``requests``, the piece at ``start``."""
        return start, self.judge.run(requests)


def _ray() -> Any:
    """The ray module, or a ModuleNotFoundError naming the extra (as the command line does)."""
    try:
        import ray
    except ImportError as exc:
        message = "the Ray engine needs Ray: pip install 'udcg[ray]'"
        raise ModuleNotFoundError(message, name="ray") from exc
    return ray


@contextmanager
def _own_errors() -> Iterator[None]:
    try:
        yield
    except _ray().exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, BaseException):
            raise cause from None
        raise


_QUIET = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}


def _gone(ray: Any, exc: BaseException) -> bool:
    """Whether ``exc`` (a ``RayActorError``) ends its actor: all but Ray's passing
    ``ActorUnavailableError`` (Ray before 2.11 has no ``ActorDiedError`` to test for)."""
    return not isinstance(exc, getattr(ray.exceptions, "ActorUnavailableError", ()))


def _drop_idle(pool: Any, dead: set[int]) -> None:
    """Take the idle slots of ``dead`` actors out of ActorPool ``pool`` (before Ray 2.58 the
    pool gives a dead actor's slot back, and each piece it takes then fails too)."""
    idle = []
    while (slot := pool.pop_idle()) is not None:
        idle.append(slot)
    for slot in reversed(idle):
        if slot[0] not in dead:
            pool.push(slot)


def _kill(actors: list[Any]) -> None:
    ray = _ray()
    for actor in actors if ray.is_initialized() else ():
        ray.kill(actor, no_restart=True)


class RayJudge(Judge):
    """A judge on Ray actors with the ``name`` and ``fingerprint`` of the judge ``load_judge``
    builds from the same arguments; ``pids`` the actors' first process ids."""

    streams_results = True

    def __init__(
        self,
        spec: str,
        name: str | None = None,
        options: Mapping[str, Any] | None = None,
        engine: RayOptions | None = None,
    ) -> None:
        engine = engine or RayOptions()
        options = dict(options or {})
        check_options(spec, options)
        key = judge_key(spec, name)
        builds = worker_specs(spec, options, engine.servers)
        self._server = spec.startswith(OPENAI)  # a server client: it mostly waits on requests
        ray = _ray()
        if not ray.is_initialized():
            ray.init(address=engine.address, **_QUIET)
        actor = ray.remote(
            num_cpus=0 if self._server else 1,
            num_gpus=engine.gpus_per_worker,
            max_restarts=engine.max_restarts,
            max_task_retries=-1,  # Ray reruns the tasks of an actor it restarts
        )(JudgeWorker)
        n, gpus, free = engine.workers, engine.gpus_per_worker, ray.cluster_resources
        if n is None:  # cluster GPUs / gpus_per_worker, else CPUs
            n = max(1, int(free().get("GPU", 0) // gpus if gpus > 0 else free().get("CPU", 1)))
        self.engine = engine
        self.actors = [actor.remote(s, key, o) for s, o in islice(cycle(builds), n)]
        self._closer = weakref.finalize(self, _kill, list(self.actors))
        refs = [a.identity.remote() for a in self.actors]
        ready, _ = ray.wait(refs, num_returns=n, timeout=engine.start_timeout)
        if len(ready) < n:
            self.close()
            raise UDCGInputError(
                f"{n - len(ready)} of {n} Ray workers did not start within "
                f"{engine.start_timeout:g} s (cluster: {_ray().cluster_resources()}): ask for "
                "fewer workers or fewer GPUs per worker"
            )
        with _own_errors():
            identities = ray.get(refs)
        self.name, self.fingerprint, _ = identities[0]
        self.pids = [pid for _, _, pid in identities]
        differ = {fp for _, fp, _ in identities} - {self.fingerprint}
        if differ:
            self.close()
            raise UDCGInputError(
                f"the Ray workers' judges differ ({self.fingerprint} vs {differ.pop()}): the "
                "servers of a pool must serve one deployment; set server_id",
                field="judge",
            )
        self._key_settings: dict[str, dict[str, Any]] = {}
        self._dead: set[int] = set()  # actors past their restarts

    def key_settings(self, operation: str) -> dict[str, Any]:
        """The live actors' settings (asked once); actors that differ are an error."""
        if operation not in self._key_settings:
            self._key_settings[operation] = self._agreed(operation, "key_settings", operation)
        return dict(self._key_settings[operation])

    def batch_settings(self, operations: Collection[str] | None = None) -> dict[str, Any]:
        """The actors' batching of ``operations`` (None: all), with the engine and its piece
        size (which set the rows that run together), when their values move with the batch (a
        local model's); else ``{}``."""
        ops = None if operations is None else sorted(operations)
        inner = self._agreed("batching", "batch_settings", ops)
        engine = {"engine": "ray", "piece_size": self._piece_size(0, 1)}
        return {**engine, **inner} if inner else {}

    @property
    def max_passage_tokens(self) -> int | None:
        """The actors' cut of passages (None: none, or a judge without one)."""
        return self._agreed("max_passage_tokens", "max_passage_tokens")

    @property
    def n_truncated(self) -> int:
        """Distinct passages the live actors cut (their digests joined), as one process
        counts them."""
        ray, cut = _ray(), set()
        for ref in [self.actors[i].cut_passages.remote() for i in self._live()]:
            with suppress(ray.exceptions.RayActorError), _own_errors():
                cut |= ray.get(ref)
        return len(cut)

    def __repr__(self) -> str:
        return f"RayJudge(name={self.name!r}, workers={len(self.actors)})"

    def close(self) -> None:
        """End the actors (the Ray instance stays)."""
        self._closer()

    def _live(self) -> list[int]:
        """Indices of the actors not known to be past their restarts."""
        return [i for i in range(len(self.actors)) if i not in self._dead]

    def _agreed(self, what: str, method: str, *args: Any) -> Any:
        """The live actors' answer to ``method(*args)`` (``what`` they resolve); actors that
        answer differently are an error (a pool's servers serving other deployments)."""
        ray, answers = _ray(), []
        for ref in [getattr(self.actors[i], method).remote(*args) for i in self._live()]:
            with suppress(ray.exceptions.RayActorError), _own_errors():
                answers.append(ray.get(ref))
        if not answers:
            raise self._all_died()
        differ = [a for a in answers if a != answers[0]]
        if differ:
            raise UDCGInputError(
                f"the Ray workers' judges resolve {what} differently ({answers[0]} vs "
                f"{differ[0]}): the servers of a pool must serve one deployment",
                field="judge",
            )
        return answers[0]

    def _all_died(self) -> UDCGServiceError:
        return UDCGServiceError(f"every Ray worker of judge {self.name!r} died")

    def _piece_size(self, items: int, slots: int) -> int:
        """Items per piece: ``piece_size`` if set; else for a server judge ``ceil(items /
        slots)`` (one piece per slot: each actor sends a piece's requests with its whole window
        and has the next queued), 8 for an in-process judge."""
        if self.engine.piece_size is not None:
            return self.engine.piece_size
        return max(1, -(-items // max(1, slots))) if self._server else 8

    def run(self, requests: Sequence[Request], on_result: OnResult | None = None) -> list[Result]:
        """Pieces over the actor pool, taken as they finish (a slow piece holds back no other);
        ``on_result`` per item as pieces return. A failed piece goes to a live actor again."""
        from ray.util import ActorPool

        ray, requests = _ray(), list(requests)
        results: list[Result | None] = [None] * len(requests)
        # slots (actor, j): each actor runs up to in_flight pieces at a time
        slots = [(i, j) for i in self._live() for j in range(self.engine.in_flight)]
        size = self._piece_size(len(requests), len(slots))
        pool = ActorPool(slots)
        running: dict[int, tuple[int, Any]] = {}  # piece start -> (its actor, its reference)
        backlog = deque(range(0, len(requests), size))  # pieces to submit

        def submit(slot: tuple[int, int], start: int) -> Any:
            ref = self.actors[slot[0]].run.remote(requests[start : start + size], start)
            running[start] = (slot[0], ref)
            return ref

        def take(start: int, out: list[Result]) -> None:
            if running.pop(start, None) is None:  # taken already (see settle)
                return
            for offset, (value, bound) in enumerate(out):
                results[start + offset] = Result(value, bool(bound))
                if on_result is not None:
                    on_result(start + offset, value, bool(bound))

        def settle() -> None:
            """After a failed piece (the pool does not say which): take every finished piece,
            send the failed ones again, and mark actors past their restarts dead."""
            refs = {ref: start for start, (_, ref) in running.items()}
            if not refs:  # the failed piece was settled already
                return
            finished, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
            for ref in finished:
                start = refs[ref]
                try:
                    with _own_errors():
                        take(*ray.get(ref))
                except ray.exceptions.RayActorError as exc:
                    actor, _ = running.pop(start)
                    if _gone(ray, exc):  # past its restarts: no more pieces for it
                        self._dead.add(actor)
                    backlog.append(start)

        while running or backlog:
            if self._dead:  # only idle slots of live actors take pieces
                _drop_idle(pool, self._dead)
            while backlog and pool.has_free():
                pool.submit(submit, backlog.popleft())
            if not pool.has_next():  # pieces wait, no actor runs: all past their restarts
                raise self._all_died()
            try:
                with _own_errors():
                    take(*pool.get_next_unordered())
            except ray.exceptions.RayActorError:
                settle()
        return results  # type: ignore[return-value]
