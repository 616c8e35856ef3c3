"""VBZ compression of signal arrays (pod5.signal_tools' functions, on escpod's codec).

A VBZ cell is what POD5 stores per signal chunk: delta + zigzag, svb16, then one zstd frame
(level 1, as the official writer). Cells from either library decode with the other's functions.
"""
from typing import List, Tuple, Union

import numpy as np

from . import _core

DEFAULT_SIGNAL_CHUNK_SIZE = 102400


def _cell(compressed_signal: Union[np.ndarray, memoryview, bytes]) -> np.ndarray:
    return np.ascontiguousarray(np.frombuffer(compressed_signal, dtype=np.uint8))


def vbz_decompress_signal(compressed_signal: Union[np.ndarray, memoryview], sample_count: int) -> np.ndarray:
    """The `sample_count` int16 samples of one VBZ cell (ValueError when it holds another count
    or is not a VBZ cell)."""
    if len(compressed_signal) == 0:
        return np.array([], dtype=np.int16)
    return _core.vbz_decompress(_cell(compressed_signal), int(sample_count))


def vbz_decompress_signal_chunked(compressed_signal_chunks: List[np.ndarray], sample_counts: List[int]) -> np.ndarray:
    """The cells of one read decoded and joined (ValueError when the two lists differ in length)."""
    if len(compressed_signal_chunks) != len(sample_counts):
        raise ValueError(
            f"Inconsistent number of chunks to decompress - "
            f"signals: {len(compressed_signal_chunks)}, counts: {len(sample_counts)}"
        )
    if len(compressed_signal_chunks) == 0:
        return np.array([], dtype=np.int16)
    return np.concatenate(
        [vbz_decompress_signal(c, n) for c, n in zip(compressed_signal_chunks, sample_counts)]
    )


def vbz_decompress_signal_into(compressed_signal: Union[np.ndarray, memoryview], output_array: np.ndarray) -> np.ndarray:
    """Decodes one cell into `output_array` (int16, as many samples as the cell holds)."""
    if len(compressed_signal) == 0:
        return np.array([], dtype=np.int16)
    output_array[:] = _core.vbz_decompress(_cell(compressed_signal), len(output_array))
    return output_array


def vbz_compress_signal(signal: np.ndarray) -> np.ndarray:
    """One VBZ cell (uint8 array) of int16 samples."""
    signal = np.ascontiguousarray(signal, dtype=np.int16)
    if signal.size == 0:
        return np.array([], dtype=np.uint8)
    return _core.vbz_compress(signal)


def vbz_compress_signal_chunked(
    signal: np.ndarray, signal_chunk_size: int = DEFAULT_SIGNAL_CHUNK_SIZE
) -> Tuple[List[np.ndarray], List[int]]:
    """Cells of consecutive `signal_chunk_size`-sample chunks, and each chunk's sample count."""
    chunks: List[np.ndarray] = []
    lengths: List[int] = []
    for start in range(0, len(signal), signal_chunk_size):
        part = signal[start : start + signal_chunk_size]
        chunks.append(vbz_compress_signal(part))
        lengths.append(len(part))
    return chunks, lengths
