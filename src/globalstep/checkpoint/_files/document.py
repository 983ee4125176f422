"""The sealed JSON documents of one checkpoint: ``state.json``, and the ``COMMITTED`` marker
that seals it with its size and checksum (and carries its own).

A checkpoint directory holds three files: ``arrays.safetensors`` (see
:mod:`globalstep.checkpoint._files.arrays`), ``state.json`` (the format version, the tree's
structure with every non-array leaf, every clock's Progress, metrics, the creation time and
the size and checksum of the array file) and ``COMMITTED``, written last. This module
writes and reads the two JSON documents and checks each against the checksum that seals
it; :func:`load_state` is the one way a reader gets a checkpoint's state. ``state.json``
is a :class:`Document`, written and read through it alone: no other module builds or
indexes its JSON.

Example:
    >>> from globalstep.storage import open_storage
    >>> storage = open_storage("memory://doc-document")
    >>> storage.makedirs(storage.join("x"))
    >>> write_document(storage, storage.join("x", COMMIT_FILE), {"format": 1}, sealed=True)
    {'size': 38, 'xxh3_64': 'aa334c92ce35b9e0'}
    >>> read_document(storage, storage.join("x", COMMIT_FILE), sealed=True)
    {'format': 1}
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from typing import Any

import xxhash

from globalstep._errors import CorruptCheckpointError
from globalstep.storage import Storage, wrap_os_errors

__all__ = [
    "ARRAYS_FILE",
    "COMMIT_FILE",
    "FORMAT_VERSION",
    "STATE_FILE",
    "Checksum",
    "Document",
    "checksum_of",
    "load_state",
    "read_document",
    "write_document",
]

FORMAT_VERSION = 1
ARRAYS_FILE = "arrays.safetensors"
STATE_FILE = "state.json"
COMMIT_FILE = "COMMITTED"


def checksum_of(data: bytes | memoryview) -> str:
    """Returns the checksum this format uses (XXH3-64, as 16 hex digits) of ``data``.

    Example:
        >>> checksum_of(b"")
        '2d06800538d394c2'
    """
    return str(xxhash.xxh3_64_hexdigest(data))


class Checksum:
    """A running XXH3-64 over the buffers being written or read, in the same pass.

    XXH3 hashes about 30 GB/s on the development machines, against 4 GB/s for zlib's
    CRC-32, so verifying a restore costs little beside copying from the page cache.

    Example:
        >>> checksum = Checksum(b"")
        >>> checksum.value() == checksum_of(b"")
        True
    """

    def __init__(self, data: bytes) -> None:
        self._hash = xxhash.xxh3_64(data)

    def feed(self, view: Any) -> None:
        """Adds ``view``'s bytes."""
        self._hash.update(view)

    def value(self) -> str:
        """Returns the checksum of everything fed, as :func:`checksum_of` spells it."""
        return str(self._hash.hexdigest())


def _encode(value: Any) -> bytes:
    """The bytes of a document: compact JSON, no NaN or infinity."""
    # Compact: with ``indent`` json falls back to its pure-Python encoder, which costs
    # about 90 us per array of a large state (``globalstep ckpt show`` prints it readably).
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


_FIELD_KEYS = (
    "format",
    "step",
    "created_unix",
    "metrics",
    "clocks",
    "tree",
    "manager",
    "previous_step",
    "timeline",
    "per_rank",
    "sharded",
    "files",
)
_OPTIONAL_KEYS = ("timeline", "per_rank", "sharded")
_NEW_KEYS = tuple(key for key in _FIELD_KEYS if key not in _OPTIONAL_KEYS)
_TF_KEYS = ("format", "created_unix", "tree", "clocks", "files")


@dataclasses.dataclass(eq=False)
class Document(Mapping[str, Any]):
    """A checkpoint's ``state.json``: one field per top-level key, written and read here
    alone, in the bytes every version since 5d95193 writes.

    The fields are typed as globalstep writes them; a document read holds the JSON values
    as they are on disk, which a reader checks where it uses them (another version, or a
    damaged file resealed, may hold other types: :func:`load_state` checks ``files`` and
    ``tree``). The nested sections (``tree``, ``clocks``, ``manager``, ``per_rank``, ...)
    are the JSON their owners write.

    A document is also a read-only mapping of its keys (``doc["step"]``), for the users of
    :meth:`~globalstep.checkpoint.CheckpointManager.metadata`'s dict and of a reader's
    ``state``; globalstep's own modules read the fields.

    Attributes:
        step: the checkpoint's step (None in a compat.tf checkpoint, keyed by its counter).
        created_unix: when it was saved (``time.time()``).
        metrics: the metrics saved with it, by name.
        clocks: every clock's :meth:`~globalstep._clock.Progress.to_dict`.
        tree: the state tree's structure, with every non-array leaf.
        manager: the writer's retention policy and save trigger.
        previous_step: the newest step before it on its timeline, or None.
        timeline: ``{"resumed_from", "abandoned"}`` where its save started a new timeline.
        per_rank: every rank's file of per-rank leaves, where there are any.
        sharded: the index of the chunks every rank wrote, where the save was sharded.
        files: the size and checksum of each array file.
        format: the format version, :data:`FORMAT_VERSION`.
        extra: the keys this version does not know (a newer one wrote them), as read.
        order: the top-level keys in the order they are written: a new document's
            writer's, a read one's as read (so that it encodes to the bytes it came from);
            an optional section (``timeline``, ``per_rank``, ``sharded``) set and not in
            it goes before ``files``.

    Example:
        >>> doc = Document(step=3, created_unix=1.5, metrics={}, clocks=[], tree=None)
        >>> data = doc.replace(files={}).to_json()
        >>> data[:60]
        b'{"format":1,"step":3,"created_unix":1.5,"metrics":{},"clocks'
        >>> Document.from_json(data).step, Document.from_json(data)["files"]
        (3, {})
    """

    step: int | None = None
    created_unix: float | None = None
    metrics: dict[str, Any] | None = None
    clocks: list[dict[str, Any]] | None = None
    tree: Any = None
    manager: dict[str, Any] | None = None
    previous_step: int | None = None
    timeline: dict[str, Any] | None = None
    per_rank: dict[str, Any] | None = None
    sharded: dict[str, Any] | None = None
    files: dict[str, Any] = dataclasses.field(default_factory=dict)
    format: int = FORMAT_VERSION
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    order: tuple[str, ...] = _NEW_KEYS

    @classmethod
    def of_tf(cls, *, created_unix: float, tree: Any, clocks: Any) -> Document:
        """A compat.tf checkpoint's document: no step, metrics or manager; its own order."""
        return cls(created_unix=created_unix, tree=tree, clocks=clocks, order=_TF_KEYS)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Document:
        """Returns the document of a decoded state.json (or of a catalogue's summary of
        one), keeping every key, known or not, and their order; checks nothing."""
        known = {key: data[key] for key in _FIELD_KEYS if key in data}
        extra = {key: value for key, value in data.items() if key not in known}
        return cls(**known, extra=extra, order=tuple(data))

    @classmethod
    def of(cls, document: Document | Mapping[str, Any]) -> Document:
        """Returns ``document``, or the document of a mapping of state.json's keys but its
        ``files`` (what :func:`~globalstep.checkpoint._files.commit.commit` takes too): its keys in
        their order, after ``format`` and before ``files`` where it holds neither."""
        if isinstance(document, Document):
            return document
        return cls.from_dict({"format": FORMAT_VERSION, **document, "files": {}})

    @classmethod
    def from_json(cls, data: bytes) -> Document:
        """Decodes state.json's bytes (see :func:`load_state` for a checked one).

        Raises:
            ValueError: not JSON, or not a JSON object.
        """
        value = json.loads(data.decode())
        if not isinstance(value, dict):
            raise ValueError(f"state.json must hold a JSON object, not {type(value).__name__}")
        return cls.from_dict(value)

    def to_dict(self) -> dict[str, Any]:
        """Returns the JSON object state.json holds, its keys in :attr:`order`."""
        keys = list(self.order)
        added = [k for k in _OPTIONAL_KEYS if k not in keys and getattr(self, k) is not None]
        if added:
            at = keys.index("files") if "files" in keys else len(keys)
            keys[at:at] = added
        extra = self.extra
        return {
            key: extra[key] if key in extra else getattr(self, key)
            for key in keys
            if key in extra or key in _FIELD_KEYS
        }

    def to_json(self) -> bytes:
        """Returns state.json's bytes: compact JSON, keys in :attr:`order`."""
        return _encode(self.to_dict())

    def replace(self, **changes: Any) -> Document:
        """Returns a copy with ``changes`` (field values by name)."""
        return dataclasses.replace(self, **changes)

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


def write_document(storage: Storage, path: str, document: Any, *, sealed: bool = False) -> Any:
    """Writes ``document`` as compact JSON to the new file ``path``, durably.

    Args:
        storage: where the file goes.
        path: the file's path.
        document: a :class:`Document`, or a JSON-serialisable value (no NaN or infinity).
        sealed: append the text's own checksum (the marker's form), so that damage to the
            file itself is named as such.

    Returns:
        ``{"size": bytes, "xxh3_64": checksum}`` of the file, for the document that
        seals it.
    """
    data = document.to_json() if isinstance(document, Document) else _encode(document)
    if sealed:
        # The marker carries its own checksum, so that damage to it is named as such.
        data += f"\nxxh3_64 {checksum_of(data)}\n".encode()
    storage.write_bytes(path, data)
    return {"size": len(data), "xxh3_64": checksum_of(data)}


def read_document(
    storage: Storage, path: str, expected: Any = None, *, sealed: bool = False
) -> Any:
    """Reads and checks one document of this format.

    Args:
        storage: where the file is.
        path: the file's path.
        expected: ``{"size", "xxh3_64"}`` the file must match (from the document that
            seals it), or None.
        sealed: the file ends with its own checksum (the marker), which must match.

    Raises:
        CorruptCheckpointError: the file is missing, fails a checksum, is not JSON, or is
            not a document of :data:`FORMAT_VERSION`; the message names the file.
    """
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError as err:
        raise CorruptCheckpointError(f"{path} is missing", path) from err
    if sealed:
        body, separator, tail = data.rstrip(b"\n").rpartition(b"\nxxh3_64 ")
        if not separator or tail != checksum_of(body).encode():
            raise CorruptCheckpointError(f"{path} fails its own checksum", path)
        data = body
    if expected is not None and (
        len(data) != expected.get("size") or checksum_of(data) != expected.get("xxh3_64")
    ):
        raise CorruptCheckpointError(
            f"{path} fails its checksum (expected size {expected.get('size')} and "
            f"XXH3-64 {expected.get('xxh3_64')}, got {len(data)} and {checksum_of(data)})",
            path,
        )
    try:
        document = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise CorruptCheckpointError(f"{path} is not valid JSON: {err}", path) from err
    if not isinstance(document, dict) or document.get("format") != FORMAT_VERSION:
        raise CorruptCheckpointError(
            f"{path} is not a globalstep checkpoint file of format {FORMAT_VERSION}", path
        )
    return document


def load_state(storage: Storage, name: str) -> Document:
    """Reads and checks the marker and state.json of checkpoint ``name``.

    Raises:
        CorruptCheckpointError: a file is missing, fails its checksum, or is not valid.
    """
    with wrap_os_errors(f"reading {name}", storage.join(name)):
        marker = read_document(storage, storage.join(name, COMMIT_FILE), sealed=True)
        expected = marker.get(STATE_FILE)
        if not isinstance(expected, dict):
            raise CorruptCheckpointError(
                f"{storage.join(name, COMMIT_FILE)} lacks the checksum of {STATE_FILE}",
                storage.join(name, COMMIT_FILE),
            )
        state = read_document(storage, storage.join(name, STATE_FILE), expected)
    path = storage.join(name, STATE_FILE)
    document = Document.from_dict(state)
    files = document.files
    if not isinstance(files, dict) or not isinstance(files.get(ARRAYS_FILE), dict):
        raise CorruptCheckpointError(f"{path} lacks the checksum of {ARRAYS_FILE}", path)
    if "tree" not in state:
        raise CorruptCheckpointError(f"{path} lacks the state tree", path)
    return document
