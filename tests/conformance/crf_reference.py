"""A plain NumPy reference of the SeqTagger / bonito CTC-CRF encoder, written from the documented
architecture (docs/demux.md §7.1) and PyTorch's published layer definitions (Conv1d,
LSTM with gate order i, f, g, o, Linear). It is the comparison point for escapepod's native
encoder in the tests and the benchmark.

Why NumPy and not PyTorch: PyPI's Linux torch wheel needs several GB of nvidia-* packages to
import at all, and the CPU-only index (download.pytorch.org) is not reachable from the test
machines, so torch cannot be a test dependency here.

The weights are read from the model's own `weights_N.tar` with Python's zipfile and a restricted
Unpickler that resolves only the three globals a float32 state_dict uses (anything else raises);
nothing is converted or written.
"""
import collections
import pickle
import zipfile

import numpy as np


class _FloatStorage:
    """Tag for torch.FloatStorage in persistent ids."""


def _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks, metadata=None):
    del requires_grad, hooks, metadata
    item = storage.itemsize
    return np.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(size),
                                           strides=tuple(s * item for s in stride)).copy()


class _StateDictUnpickler(pickle.Unpickler):
    ALLOWED = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
        ("torch", "FloatStorage"): _FloatStorage,
    }

    def __init__(self, data, archive, prefix):
        super().__init__(data)
        self._archive = archive
        self._prefix = prefix

    def find_class(self, module, name):
        try:
            return self.ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"global {module}.{name} refused") from None

    def persistent_load(self, pid):
        kind, storage_type, key, _location, numel = pid
        if kind != "storage" or storage_type is not _FloatStorage:
            raise pickle.UnpicklingError(f"persistent id {pid!r} refused")
        raw = self._archive.read(f"{self._prefix}data/{key}")
        arr = np.frombuffer(raw, dtype="<f4")
        assert arr.size == numel, (key, arr.size, numel)
        return arr


def load_state_dict(path):
    """{name: float32 ndarray} from a torch.save zip file."""
    import io
    with zipfile.ZipFile(path) as z:
        pkl = [n for n in z.namelist() if n.endswith("/data.pkl")]
        assert len(pkl) == 1, pkl
        prefix = pkl[0][: -len("data.pkl")]
        return dict(_StateDictUnpickler(io.BytesIO(z.read(pkl[0])), z, prefix).load())


def _swish(x):
    return x / (1.0 + np.exp(-x))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def conv1d(x, w, b, stride, pad):
    """x [N, C, L], w [O, C, K] -> [N, O, L'] (torch.nn.Conv1d, cross-correlation)."""
    k = w.shape[2]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, k, axis=2)[:, :, ::stride, :]  # [N, C, L', K]
    return np.einsum("nclk,ock->nol", win, w, optimize=True) + b[None, :, None]


def lstm(x, w_ih, w_hh, b_ih, b_hh, reverse):
    """x [T, N, C] -> [T, N, H]; torch gate order i, f, g, o; zero initial state."""
    t_len, n, _ = x.shape
    h_size = w_hh.shape[1]
    xs = x[::-1] if reverse else x
    gx = xs @ w_ih.T + (b_ih + b_hh)
    h = np.zeros((n, h_size), dtype=x.dtype)
    c = np.zeros((n, h_size), dtype=x.dtype)
    out = np.empty((t_len, n, h_size), dtype=x.dtype)
    for t in range(t_len):
        g = gx[t] + h @ w_hh.T
        i, f, gg, o = np.split(g, 4, axis=1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(gg)
        h = _sigmoid(o) * np.tanh(c)
        out[t] = h
    return out[::-1] if reverse else out


def encoder(sd, x, stride=10, scale=5.0, blank=2.0, n_base=4, dtype=np.float32):
    """Scores [T, N, 1280] for windows x [N, L] (already normalised)."""
    p = {k: v.astype(dtype) for k, v in sd.items()}
    h = x[:, None, :].astype(dtype)
    for i in range(3):
        w = p[f"encoder.{i}.conv.weight"]
        h = _swish(conv1d(h, w, p[f"encoder.{i}.conv.bias"], stride if i == 2 else 1, w.shape[2] // 2))
    h = np.ascontiguousarray(h.transpose(2, 0, 1))
    layer, reverse = 4, True
    while f"encoder.{layer}.rnn.weight_ih_l0" in p:
        r = f"encoder.{layer}.rnn."
        h = lstm(h, p[r + "weight_ih_l0"], p[r + "weight_hh_l0"], p[r + "bias_ih_l0"], p[r + "bias_hh_l0"], reverse)
        layer, reverse = layer + 1, not reverse
    s = np.tanh(h @ p[f"encoder.{layer}.linear.weight"].T + p[f"encoder.{layer}.linear.bias"]) * scale
    t_len, n, c = s.shape
    s = s.reshape(t_len, n, c // n_base, n_base)
    s = np.concatenate([np.full((t_len, n, c // n_base, 1), blank, dtype=s.dtype), s], axis=3)
    return s.reshape(t_len, n, -1)


def med_mad(x):
    med = np.median(x)
    mad = np.median(np.abs(x - med))
    return (x - med) / (1.4826 * mad)


def real_windows(pod5_path, n_windows, length, end_offsets, standardise=None):
    """`n_windows` windows of `length` picoampere samples ending at each of `end_offsets` in the
    first reads of a POD5, normalised by med/MAD of the window or by (mean, stdev)."""
    import pod5
    out = []
    with pod5.Reader(pod5_path) as reader:
        for read in reader.reads():
            pa = read.signal_pa.astype(np.float64)
            for end in end_offsets:
                if end <= len(pa) and len(out) < n_windows:
                    w = pa[end - length:end]
                    w = (w - standardise[0]) / standardise[1] if standardise else med_mad(w)
                    out.append(w.astype(np.float32))
            if len(out) >= n_windows:
                break
    return np.stack(out)
