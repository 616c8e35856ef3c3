"""DatasetReader: pod5.DatasetReader's API, with a read-id index from `escpod index` or from the
files' read-id columns scanned in parallel."""
import glob
import os
import warnings
from pathlib import Path
from typing import Collection, Dict, Generator, Iterable, List, Optional, Set, Union

import numpy as np

from . import _core
from .pod5_types import PathOrStr
from .reader import Pod5ApiException, Reader, ReadRecord, pack_read_ids, stream_arrays

DEFAULT_CPUS = min(os.cpu_count() or 1, 4)


def _search_path(path: Path, recursive: bool, pattern: str) -> Set[Path]:
    found: Set[Path] = set()
    if path.is_dir():
        spec = str(path / "**" / "*") if recursive else str(path / "*")
        for name in glob.glob(spec, recursive=recursive):
            p = Path(name)
            if p.is_file() and p.match(pattern):
                found.add(p)
    elif path.is_file() and path.match(pattern):
        found.add(path)
    return found


class DatasetReader:
    """Many POD5 files (and folders of them) read as one dataset.

    Differences from pod5: readers stay open until clear_readers()/the with block ends (no LRU
    of 16), reads() yields files in path order (pod5 yields them as its threads finish), and the
    read-id index maps ids to (file, batch, row) (see index_read_ids), so get_read() decodes only
    the reads batch holding the read.
    """

    def __init__(
        self,
        paths: Union[PathOrStr, Collection[PathOrStr]],
        recursive: bool = False,
        pattern: str = "*.pod5",
        index: bool = False,
        threads: int = DEFAULT_CPUS,
        max_cached_readers: Optional[int] = 2**4,
        warn_duplicate_indexing: bool = True,
        use_read_index: bool = True,
    ) -> None:
        if isinstance(paths, (str, Path, os.PathLike)):
            paths = [paths]
        if not isinstance(paths, Collection):
            raise TypeError(f"paths must be a Collection[PathOrStr] but found {type(paths)=}")
        collected: Set[Path] = set()
        for p in paths:
            collected.update(_search_path(Path(p), recursive, pattern))
        self._paths: List[Path] = sorted(collected)
        self._path_pos = {p: i for i, p in enumerate(self._paths)}
        self.threads = threads
        self.warn_duplicate_indexing = warn_duplicate_indexing
        self.use_read_index = use_read_index
        self._readers: Dict[Path, Reader] = {}
        self._index = None
        self._scanned_has_duplicate: Optional[bool] = None
        self._num_reads: Optional[int] = None
        if index:
            self.index_read_ids()

    def __enter__(self) -> "DatasetReader":
        return self

    def __exit__(self, *exc_details) -> None:
        self.clear_index()
        self.clear_readers()

    def __iter__(self) -> Generator[ReadRecord, None, None]:
        yield from self.reads()

    def __len__(self) -> int:
        return self.num_reads

    @property
    def paths(self) -> List[Path]:
        return self._paths

    def get_reader(self, path: PathOrStr) -> Reader:
        path = Path(path)
        reader = self._readers.get(path)
        if reader is None:
            try:
                reader = Reader(path, _random_access=True)
            except FileNotFoundError:
                raise
            except Exception as exc:
                raise Pod5ApiException(f"DatasetReader error reading: {[path]}: {exc}") from exc
            self._readers[path] = reader
        return reader

    def _open_all(self) -> None:
        """Opens every file not open yet, in parallel on `threads` cores (as get_reader does)."""
        todo = [p for p in self._paths if p not in self._readers]
        if len(todo) < 2:
            return
        missing = [p for p in todo if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"Failed to open pod5 file at: {missing[0].absolute()}")
        try:
            handles = _core.open_files([str(p.absolute()) for p in todo], self.threads)
        except Exception as exc:
            raise Pod5ApiException(f"DatasetReader error reading: {exc}") from exc
        for p, handle in zip(todo, handles):
            self._readers[p] = Reader(p, _random_access=True, _file=handle)

    def clear_readers(self) -> None:
        for r in self._readers.values():
            r.close()
        self._readers = {}
        self._index = None

    def clear_index(self) -> None:
        self._index = None
        self._scanned_has_duplicate = None

    @property
    def num_reads(self) -> int:
        if self._num_reads is None:
            self._num_reads = sum(self.get_reader(p).num_reads for p in self._paths)
        return self._num_reads

    @property
    def read_ids(self) -> Generator[str, None, None]:
        for p in self._paths:
            yield from self.get_reader(p).read_ids

    def reads(
        self, selection: Optional[Iterable[str]] = None, preload: Optional[Set[str]] = None
    ) -> Generator[ReadRecord, None, None]:
        if selection is not None:
            selection = list(selection)
        for p in self._paths:
            yield from self.get_reader(p).reads(selection=selection, missing_ok=True)

    def index_read_ids(self) -> None:
        """Builds the read-id index: files covered by an `escpod index` (a `.escpod-index`
        folder at or above theirs, fresh for the file) are looked up there; the read-id column
        of every other file is scanned, batches in parallel on `threads` cores. No other column
        is decoded until a read is asked for."""
        if self._index is None:
            self._open_all()
            files = [self.get_reader(p)._file_handle() for p in self._paths]
            self._index = _core.Index(files, self.threads, self.use_read_index)

    def has_duplicate(self) -> bool:
        self.index_read_ids()
        if self._index.n_duplicates > 0:
            return True
        if self._index.complete:
            return False
        # Files answered by a persistent index: their ids are not all in memory; scan them once.
        if self._scanned_has_duplicate is None:
            files = [self.get_reader(p)._file_handle() for p in self._paths]
            self._scanned_has_duplicate = _core.Index(files, self.threads, False).n_duplicates > 0
        return self._scanned_has_duplicate

    def _lookup(self, read_ids: List[str]):
        self.index_read_ids()
        found = self._index.lookup(pack_read_ids(read_ids))
        if self.warn_duplicate_indexing and self._index.n_duplicates > 0:
            warnings.warn("duplicate read_ids found in dataset")
        return found

    def get_path(self, read_id: str) -> Optional[Path]:
        try:
            files, _, _ = self._lookup([read_id])
        except RuntimeError:
            return None
        return None if files[0] < 0 else self._paths[int(files[0])]

    def _reader_at(self, file_idx: int) -> Reader:
        reader = self._readers.get(self._paths[file_idx])
        return reader if reader is not None else self.get_reader(self._paths[file_idx])

    def get_read(self, read_id: str) -> Optional[ReadRecord]:
        """The read with this id, or None (an invalid id also gives None, as in pod5). Decodes
        only the reads batch holding it (kept for later reads of the same batch)."""
        self.index_read_ids()
        try:
            found = self._index.find(str(read_id))
        except ValueError:
            return None
        if self.warn_duplicate_indexing and self._index.n_duplicates > 0:
            warnings.warn("duplicate read_ids found in dataset")
        if found is None:
            return None
        file_idx, batch, row = found
        return self._reader_at(file_idx).get_batch(batch).get_read(row)

    # ---- escpod extensions -------------------------------------------------------------------

    def get_reads(self, read_ids: Iterable[str]) -> List[Optional[ReadRecord]]:
        """Records of many ids at once (None where absent), in the order given: on random-access
        opens each row is read alone, on `threads` cores."""
        read_ids = list(read_ids)
        files, batches, rows = self._lookup(read_ids)
        out: List[Optional[ReadRecord]] = [None] * len(read_ids)
        for f in np.unique(files[files >= 0]).tolist():
            at = np.flatnonzero(files == f)
            records = self._reader_at(f)._records_at(batches[at], rows[at], self.threads)
            for k, rec in zip(at.tolist(), records):
                out[k] = rec
        return out

    def get_signals(self, read_ids: Iterable[str], pa: bool = True, threads: int = 0) -> List[np.ndarray]:
        """Signals of `read_ids` (KeyError naming the first absent id), decoded on `threads`
        cores (0: all), as float32 picoamps or int16 ADC counts; views of one buffer."""
        self.index_read_ids()
        buf, offsets = self._index.signals(pack_read_ids(list(read_ids)), pa, threads)
        return [buf[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]

    def iter_signals(
        self, read_ids: Iterable[str], pa: bool = True, threads: int = 0, chunk_samples: int = 1 << 20
    ) -> Generator[np.ndarray, None, None]:
        """The streaming form of get_signals: the signals of `read_ids` in the order given (KeyError
        naming the first absent id, before any is yielded), decoded chunk by chunk (about
        `chunk_samples` samples, whole reads) on `threads` cores (0: all). A chunk's buffer is
        reused once its arrays are freed, so a loop that uses each signal and drops it holds and
        first touches a few chunks of memory however many ids it asks for."""
        self.index_read_ids()
        stream = self._index.signal_stream(pack_read_ids(list(read_ids)), pa, threads, chunk_samples)
        yield from stream_arrays(stream)
