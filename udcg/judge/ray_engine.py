"""Judge calls spread over a Ray cluster (the ``ray`` extra): :class:`RayJudge`.

Each of N Ray actors builds the judge from its spec in its own process
(:func:`udcg.judge.load_judge`: a transformers model per GPU worker, or a client of an
OpenAI-compatible server). A call splits its items into pieces of ``piece_size`` and maps them
over the actors with Ray's :class:`~ray.util.ActorPool` (each actor in the pool ``in_flight``
times), reporting every item (``on_result``) as its piece comes back in input order; upper-bound
masks are kept. Ray restarts an actor that dies (``max_restarts``) and reruns its tasks there
(``max_task_retries``); a piece whose actor is past its restarts is submitted again to the pool
of live actors. Only the calling process sees the results, so the on-disk cache
(:class:`~udcg.judge.cached.CachedJudge` around this judge) has one writer and a killed driver
resumes from it.

``address`` joins a running cluster (``auto``: the one this machine belongs to; a ``ray://``
address goes through the Ray client, which needs ``pip install "ray[client]"``: without it the
address is refused before any work); without it a Ray instance already started in this process
is used, else a local one is started. A Ray instance is never shut down here. Importing this
module does not import ``ray``.
"""

from __future__ import annotations

import importlib.util
import os
import weakref
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from udcg.errors import UDCGInputError, UDCGServiceError
from udcg.judge.base import Judge, OnResult
from udcg.judge.options import check_options
from udcg.judge.requests import Request, Result
from udcg.judge.spec import EMBEDDED, OPENAI, PRECOMPUTED, judge_key, split_openai
from udcg.validation import nonnegative_float, nonnegative_int, one_of, positive_int, show

#: How judge calls run: in this process, or on Ray actors.
ENGINES = ("local", "ray")


@dataclass(frozen=True)
class RayOptions:
    """Where and how :class:`RayJudge` runs: the cluster ``address`` (None: a Ray instance of
    this process, else a local one), the number of actors ``workers`` (None: the cluster's
    GPUs / ``gpus_per_worker``, else its CPUs), the GPUs each actor holds, the base URLs of a
    pool of servers of one deployment (assigned round-robin to the actors; openai judges),
    items per piece, pieces queued per actor, Ray restarts per actor, and the seconds the
    actors have to start (load their judge) before the call fails. An actor holds one CPU,
    none for an openai judge (its process waits on its server)."""

    address: str | None = None
    workers: int | None = None
    gpus_per_worker: float = 0.0
    servers: tuple[str, ...] = ()
    piece_size: int = 8
    in_flight: int = 2
    max_restarts: int = 3
    start_timeout: float = 300.0


def _has_ray_client() -> bool:
    """Whether the Ray client's dependencies (``ray[client]``: grpcio) are installed."""
    return importlib.util.find_spec("grpc") is not None


def ray_options(values: Mapping[str, Any], prefix: str = "") -> RayOptions:
    """:class:`RayOptions` from a mapping of its fields, checked; a mistake names the field as
    ``prefix`` + its name."""
    if not isinstance(values, Mapping):
        raise UDCGInputError(
            f"must be a mapping of Ray options, got {show(values)}", field=prefix.rstrip(".")
        )
    fields = RayOptions.__dataclass_fields__
    for key in values:
        if key not in fields:
            raise UDCGInputError(
                f"not a Ray option; the options: {', '.join(fields)}", field=f"{prefix}{key}"
            )
    got = {**{k: f.default for k, f in fields.items()}, **values}
    address, servers = got["address"], got["servers"]
    if address is not None and not (isinstance(address, str) and address.strip()):
        raise UDCGInputError(
            f"must be a cluster address, got {show(address)}", field=f"{prefix}address"
        )
    if address is not None and address.strip().startswith("ray://") and not _has_ray_client():
        raise UDCGInputError(
            f"{address} is reached through the Ray client, which is not installed: "
            'pip install "ray[client]"',
            field=f"{prefix}address",
        )
    if got["workers"] is not None:
        positive_int(got["workers"], f"{prefix}workers")
    if isinstance(servers, str) or not isinstance(servers, Sequence):
        raise UDCGInputError(
            f"must be a list of URLs, got {show(servers)}", field=f"{prefix}servers"
        )
    for i, url in enumerate(servers):
        if not (isinstance(url, str) and url.strip()):
            raise UDCGInputError(f"must be a URL, got {show(url)}", field=f"{prefix}servers[{i}]")
    for name in ("piece_size", "in_flight"):
        positive_int(got[name], f"{prefix}{name}")
    nonnegative_int(got["max_restarts"], f"{prefix}max_restarts")
    if not nonnegative_float(got["start_timeout"], f"{prefix}start_timeout") > 0:
        raise UDCGInputError("must be > 0, got 0", field=f"{prefix}start_timeout")
    return RayOptions(
        **{
            **got,
            "gpus_per_worker": nonnegative_float(
                got["gpus_per_worker"], f"{prefix}gpus_per_worker"
            ),
            "servers": tuple(servers),
            "start_timeout": float(got["start_timeout"]),
        }
    )


def engine_options(
    engine: str, values: Mapping[str, Any], prefix: str = "ray."
) -> RayOptions | None:
    """The Ray options for ``engine``, checked (None for ``local``).

    Examples:
        >>> options = engine_options("ray", {"workers": 2, "servers": ["http://gpu-0:8000/v1"]})
        >>> options.workers, options.servers, options.piece_size
        (2, ('http://gpu-0:8000/v1',), 8)
        >>> engine_options("local", {}) is None
        True
    """
    one_of(engine, "engine", ENGINES)
    options = ray_options(values, prefix)
    return None if engine == "local" else options


def worker_specs(
    spec: str, options: Mapping[str, Any], servers: Sequence[str]
) -> list[tuple[str, dict[str, Any]]]:
    """The (spec, options) each worker builds its judge from, one per server of ``servers``
    (one for all when empty): an openai spec points at each server in turn, with
    ``server_id`` (unless set) the spec's own URL, so every worker has the single-process
    judge's fingerprint; a local file or folder is made absolute (a worker may run elsewhere
    in the file system)."""
    if servers and not spec.startswith(OPENAI):
        raise UDCGInputError(
            "a pool of servers needs an openai:MODEL@BASE_URL judge", field="servers"
        )
    if spec.startswith(OPENAI):
        from udcg.judge.openai_http import split_base_url

        model, base_url = split_openai(spec)
        pinned = {"server_id": split_base_url(base_url)[0], **options}
        return [(f"{OPENAI}{model}@{url}", pinned) for url in servers] or [(spec, dict(options))]
    if spec.startswith(PRECOMPUTED):
        path = Path(spec.removeprefix(PRECOMPUTED)).expanduser()
        return [(PRECOMPUTED + str(path.resolve()), dict(options))]
    if spec != EMBEDDED and Path(spec).expanduser().exists():
        return [(str(Path(spec).expanduser().resolve()), dict(options))]
    return [(spec, dict(options))]


class JudgeWorker:
    """The body of a Ray actor: one judge built by :func:`udcg.judge.load_judge`. A failure
    to build it is raised by :meth:`identity`, as a task error the driver can show."""

    def __init__(self, spec: str, name: str, options: Mapping[str, Any]) -> None:
        from udcg.judge.loading import load_judge

        self.judge: Judge | None = None
        self.error: Exception | None = None
        try:
            self.judge = load_judge(spec, name, **options)
        except Exception as exc:  # shown by identity(), not by Ray's actor-death report
            self.error = exc

    def identity(self) -> tuple[str, str, int]:
        """``(name, fingerprint, process id)`` of the judge, probed."""
        if self.judge is None:
            raise self.error or RuntimeError("no judge")
        self.judge.probe()
        return self.judge.name, self.judge.fingerprint, os.getpid()

    def key_settings(self, operation: str) -> dict[str, Any]:
        """The judge's :meth:`~udcg.judge.base.Judge.key_settings` of ``operation``."""
        assert self.judge is not None
        return self.judge.key_settings(operation)

    def run(self, requests: Sequence[Request]) -> list[Result]:
        """The judge's results of one piece of requests."""
        assert self.judge is not None
        return self.judge.run(requests)


def _ray() -> Any:
    import ray

    return ray


def connect(address: str | None) -> None:
    """Join the cluster at ``address``, or use this process's Ray instance, else start a
    local one (quiet: no dashboard, worker logs not forwarded)."""
    import logging

    ray = _ray()
    if ray.is_initialized():
        return
    ray.init(
        address=address,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )


def default_workers(options: RayOptions) -> int:
    """Actors when ``workers`` is unset: cluster GPUs / ``gpus_per_worker``, else CPUs."""
    if options.workers is not None:
        return options.workers
    resources = _ray().cluster_resources()
    if options.gpus_per_worker > 0:
        return max(1, int(resources.get("GPU", 0) // options.gpus_per_worker))
    return max(1, int(resources.get("CPU", 1)))


@contextmanager
def _own_errors() -> Iterator[None]:
    """A Ray task's own exception raised as itself."""
    try:
        yield
    except _ray().exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, BaseException):
            raise cause from None
        raise


def _kill(actors: list[Any]) -> None:
    ray = _ray()
    for actor in actors if ray.is_initialized() else ():
        ray.kill(actor, no_restart=True)


class RayJudge(Judge):
    """A judge whose calls run on Ray actors (see the module docstring); same ``name`` and
    ``fingerprint`` as the judge :func:`udcg.judge.load_judge` builds from the same spec,
    name and options, so its results share that judge's cache entries. ``pids`` are the
    actors' process ids (as first started). :meth:`close` ends the actors."""

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
        connect(engine.address)
        ray = _ray()
        actor = ray.remote(
            num_cpus=0 if spec.startswith(OPENAI) else 1,  # a server client mostly waits
            num_gpus=engine.gpus_per_worker,
            max_restarts=engine.max_restarts,
            max_task_retries=-1,  # Ray reruns the tasks of an actor it restarts
        )(JudgeWorker)
        n = default_workers(engine)
        self.engine = engine
        self.actors = [
            actor.remote(build_spec, key, build_options)
            for build_spec, build_options in (builds[i % len(builds)] for i in range(n))
        ]
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

    def key_settings(self, operation: str) -> dict[str, Any]:
        """The live actors' :meth:`~udcg.judge.base.Judge.key_settings` of ``operation``
        (asked once); actors that resolve different settings are an error, as different
        fingerprints are."""
        if operation not in self._key_settings:
            ray = _ray()
            answers = []
            for ref in [actor.key_settings.remote(operation) for actor in self.actors]:
                with suppress(ray.exceptions.ActorDiedError), _own_errors():
                    answers.append(ray.get(ref))
            if not answers:
                raise self._all_died()
            differ = [a for a in answers if a != answers[0]]
            if differ:
                raise UDCGInputError(
                    f"the Ray workers' judges resolve {operation} differently ({answers[0]} vs "
                    f"{differ[0]}): the servers of a pool must serve one deployment",
                    field="judge",
                )
            self._key_settings[operation] = answers[0]
        return dict(self._key_settings[operation])

    def __repr__(self) -> str:
        return f"RayJudge(name={self.name!r}, workers={len(self.actors)})"

    def close(self) -> None:
        """End the actors (the Ray instance stays)."""
        self._closer()

    def _all_died(self) -> UDCGServiceError:
        return UDCGServiceError(f"every Ray worker of judge {self.name!r} died")

    def run(self, requests: Sequence[Request], on_result: OnResult | None = None) -> list[Result]:
        """The requests in pieces mapped over an :class:`~ray.util.ActorPool` of the actors,
        ``on_result`` called per item as pieces come back (in input order, a resubmitted piece
        last)."""
        from ray.util import ActorPool

        ray = _ray()
        requests = list(requests)
        size = self.engine.piece_size
        results: list[Result | None] = [None] * len(requests)
        pool = ActorPool(self.actors * self.engine.in_flight)

        def submit(actor: Any, start: int) -> Any:
            return actor.run.remote(requests[start : start + size])

        order = deque(range(0, len(requests), size))  # the pieces in the order get_next returns
        for start in order:
            pool.submit(submit, start)
        while order:
            if not pool.has_next():  # pieces wait, no actor runs: all past their restarts
                raise self._all_died()
            start = order.popleft()
            try:
                with _own_errors():
                    out = pool.get_next()
            except ray.exceptions.RayActorError:  # past its restarts: the pool drops it
                order.append(start)
                pool.submit(submit, start)
                continue
            for offset, (value, bound) in enumerate(out):
                results[start + offset] = Result(value, bool(bound))
                if on_result is not None:
                    on_result(start + offset, value, bool(bound))
        return results  # type: ignore[return-value]
