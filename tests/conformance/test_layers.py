"""README's layer map ("The library") against the CMake build: every escpod layer library's direct
dependencies on other layers, as `cmake --graphviz` reports the build's link declarations
(public and private), must be the ones the README lists in its brackets.

The build folder is the one the tested binary lives in (<build>/src/cli/escpod). Layers the build
leaves out (ESCPOD_SKIP_LAYERS, no CUDA, ...) are not compared, and README names of layers that
build does not have are ignored.
"""
import pathlib
import re
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
# The pipeline's sub-layers: library escpod_pipeline_<sub>, folder src/pipeline/<sub>.
PIPELINE = "pipeline"

_NODE = re.compile(r'^\s*"(node\d+)" \[ label = "([^"\\]+)(?:\\n\(([^)]*)\))?", shape = (\w+) \];')
_EDGE = re.compile(r'^\s*"(node\d+)" -> "(node\d+)"')
_BULLET = re.compile(r"^(\s*)- `([a-z0-9_]+)`(?: \[([^\]]*)\])?:")


def build_graph(build: pathlib.Path, tmp_path: pathlib.Path):
    """{layer: set of layers it links} for every layer library of the build. Layer libraries are
    the static libraries escpod_add_library declares: escpod_<name> with the alias escpod::<name>
    (pipeline sub-layers are named pipeline_<sub>)."""
    cache = build / "CMakeCache.txt"
    if not cache.is_file():
        pytest.fail(f"no CMake build at {build} (expected {cache})")
    cmake = "cmake"
    for line in cache.read_text().splitlines():
        if line.startswith("CMAKE_COMMAND:INTERNAL="):
            cmake = line.split("=", 1)[1]
    dot = tmp_path / "layers.dot"
    result = subprocess.run([cmake, f"--graphviz={dot}", str(build)], capture_output=True, text=True)
    if result.returncode != 0 or not dot.is_file():
        pytest.fail(f"cmake --graphviz failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    names, edges = {}, []
    for line in dot.read_text().splitlines():
        if m := _NODE.match(line):
            node, target, alias, shape = m.groups()
            # A layer: a static library (octagon) with the escpod::<name> alias of its target.
            if shape == "octagon" and alias and alias == "escpod::" + target.removeprefix("escpod_"):
                names[node] = target.removeprefix("escpod_")
        elif m := _EDGE.match(line):
            edges.append(m.groups())
    deps = {name: set() for name in names.values()}
    for a, b in edges:
        if a in names and b in names:
            deps[names[a]].add(names[b])
    return deps


def readme_map(readme: pathlib.Path):
    """({layer: set}, {sub-layer: set of raw names}) from README's "The library" bullets. A layer
    bullet without brackets links no layer; sub-layers are the indented bullets under pipeline."""
    text = readme.read_text()
    start = text.find("\n## The library")
    assert start >= 0, f'{readme}: no "## The library" section'
    end = text.find("\n## ", start + 1)
    section = text[start:end if end >= 0 else len(text)]
    layers, subs = {}, {}
    parent = None
    for line in section.splitlines():
        m = _BULLET.match(line)
        if not m:
            continue
        indent, name, bracket = m.groups()
        listed = {n.strip() for n in bracket.split(",") if n.strip()} if bracket is not None else set()
        if indent:
            assert parent == PIPELINE, f"README: `{name}` is indented under `{parent}`, not `pipeline`"
            subs[name] = listed
        else:
            parent = name
            layers[name] = listed
    return layers, subs


def describe(names):
    return "[" + ", ".join(sorted(names)) + "]" if names else "[] (none)"


def test_readme_layer_map_matches_the_build(escpod, tmp_path):
    build = pathlib.Path(escpod).resolve().parent.parent.parent
    deps = build_graph(build, tmp_path)
    assert "core" in deps and "pod5" in deps, f"no layer libraries found in {build}'s graph: {sorted(deps)}"
    layers, subs = readme_map(REPO / "README.md")
    built_subs = {n.removeprefix(PIPELINE + "_") for n in deps if n.startswith(PIPELINE + "_")}
    built_layers = {n for n in deps if not n.startswith(PIPELINE + "_")}

    problems = []

    def compare(what, listed, linked):
        if listed != linked:
            missing, extra = linked - listed, listed - linked
            detail = "; ".join(part for part in (
                f"the build also links {describe(missing)}" if missing else "",
                f"the build does not link {describe(extra)}" if extra else "") if part)
            problems.append(f"{what}: README says {describe(listed)}, the build links {describe(linked)} ({detail})")

    def as_layer(name):
        return name if name in built_layers else None

    # Top-level layers.
    for layer in sorted(built_layers):
        if layer not in layers:
            problems.append(f"`{layer}`: a layer of the build that README's map does not list")
            continue
        listed = {n for n in layers[layer] if n in built_layers or n not in _known_layers()}
        compare(f"`{layer}`", listed, deps[layer])
    for layer in sorted(layers):
        if layer not in built_layers and layer != PIPELINE and layer not in _known_layers():
            problems.append(f"`{layer}`: README lists a layer that has no src/{layer}/ folder")

    # Pipeline sub-layers: a sibling's name is a sub-layer, any other name a layer (the sub-layer
    # `demux` shares its name with the layer; nothing may link the pipeline's demux sub-layer).
    siblings = built_subs | set(subs)
    for sub in sorted(built_subs):
        linked = {("pipeline/" + n.removeprefix(PIPELINE + "_")) if n.startswith(PIPELINE + "_") else n
                  for n in deps[PIPELINE + "_" + sub]}
        if sub not in subs:
            problems.append(f"pipeline sub-layer `{sub}`: in the build, not in README's map")
            continue
        listed = set()
        for n in subs[sub]:
            if n in siblings and n not in _known_layers():
                if n in built_subs:
                    listed.add("pipeline/" + n)
            elif n in built_layers or n not in _known_layers():
                listed.add(n)
        compare(f"pipeline sub-layer `{sub}`", listed, linked)
        if "pipeline/demux" in linked:
            problems.append(f"pipeline sub-layer `{sub}` links the pipeline's demux sub-layer, which "
                            "README's map cannot name (its `demux` means the demux layer)")
    for sub in sorted(set(subs) - built_subs):
        if not (REPO / "src" / PIPELINE / sub).is_dir():
            problems.append(f"README lists a pipeline sub-layer `{sub}` that has no src/pipeline/{sub}/")

    # The pipeline as a whole: the layers its sub-layers link.
    if built_subs and PIPELINE in layers:
        union = set()
        for sub in built_subs:
            union |= {n for n in deps[PIPELINE + "_" + sub] if not n.startswith(PIPELINE + "_")}
        listed = {n for n in layers[PIPELINE] if n in built_layers or n not in _known_layers()}
        compare("`pipeline` (the layers its sub-layers link)", listed, union)

    assert not problems, ("README.md's layer map (\"The library\") disagrees with the build in "
                          f"{build}:\n  " + "\n  ".join(problems))


def _known_layers():
    """Layer names this source tree has (folders of src/ with a CMakeLists.txt)."""
    return {p.parent.name for p in (REPO / "src").glob("*/CMakeLists.txt")} - {"cli", "python"}


def test_readme_map_parser_reads_every_bullet():
    """The parser sees the map README holds (a renamed heading or bullet style would otherwise
    make the comparison vacuous)."""
    layers, subs = readme_map(REPO / "README.md")
    assert {"core", "pod5", "signal", "nn", "demux", "pipeline"} <= set(layers), layers
    assert {"ops", "tables"} <= set(subs), subs
