// Progress of long runs on stderr: a bar redrawn in place on a terminal, plain periodic lines
// when stderr is a file or a pipe, nothing when switched off (the CLI's -q).
//
// A `progress::Task` counts work done (items, usually reads, and input bytes) against totals
// declared when it starts (from the inputs' footers and file sizes, so the bar is honest from
// the first second). Workers add to it with relaxed atomics; a renderer thread owned by the
// task draws it. One task is shown at a time, process-wide: a task started while another is
// running joins it (its adds go to the running one, its totals only fill the running one's
// unknown totals), so engines can start tasks without knowing whether a caller already did.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace escpod::progress {

enum class Mode {
  kOff,    // nothing is drawn (library default; the CLI's -q)
  kAuto,   // kBar when stderr is a terminal, else kLines (the CLI's default)
  kBar,    // a bar redrawn in place with '\r', ended by a newline and a summary line
  kLines,  // one plain line per interval, then a summary line if any line was printed
};

// Process-wide mode (one stderr). The environment variable ESCPOD_PROGRESS=off|auto|bar|lines,
// when set, overrides what set_mode() asks for (used by tests and by users forcing a mode).
// ESCPOD_PROGRESS_INTERVAL=SECONDS sets the kLines interval (default 10, fractions allowed).
// Thread-safe; affects tasks started afterwards.
void set_mode(Mode mode);
Mode mode();
// The label tasks show when they were started without one (the CLI sets the command path,
// e.g. "demux detect"). Call before tasks start; not synchronised with running tasks.
void set_default_label(std::string label);

// What a task has done so far: the input of the formatting functions below.
struct Snapshot {
  std::string label;
  std::string unit = "reads";  // plural noun of the items
  uint64_t items_done = 0;
  uint64_t items_total = 0;  // 0: unknown
  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;  // 0: unknown (bytes are then shown only if some were counted)
  double elapsed_s = 0;
};

// Fraction done in [0, 1] from bytes when their total is known, else from items; -1 when no
// total is known.
double fraction_done(const Snapshot& s);
// Seconds left at the average rate so far; -1 when unknown (no total, nothing done yet) or when
// everything is done.
double seconds_left(const Snapshot& s);
// "12s", "3:07", "1:02:03".
std::string format_duration(double seconds);
// Decimal units: "0 B", "999 B", "1.2 kB", "34.5 MB", "1.23 GB".
std::string format_bytes(uint64_t bytes);
// Items with thousands separators: "1,234,567".
std::string format_count(uint64_t n);
// One bar line, without '\r' or newline, at most `width` columns (the bar itself shrinks first,
// then the less useful fields are dropped):
//   "demux [######>      ] 45% 1,234/2,700 reads 1.2/2.6 GB 523 reads/s 0:12 ~0:15 left"
std::string format_bar(const Snapshot& s, int width);
// One periodic plain line (no '\r', no newline):
//   "demux: 1,234/2,700 reads (45.7%), 1.2/2.6 GB, 523 reads/s, 12s elapsed, ~15s left"
std::string format_line(const Snapshot& s);
// The closing summary (no newline): "demux: done, 2,700 reads, 2.6 GB in 27s (100 reads/s)".
std::string format_summary(const Snapshot& s);

struct TaskOptions {
  std::string label;           // empty: the default label (set_default_label)
  std::string unit = "reads";  // plural noun of the items
};

// A unit of reported work, from construction to finish() (or destruction). Thread-safe: add()
// and add_totals() may be called from any thread at once; finish() from the owning thread.
class Task {
 public:
  // Declares the totals (0 = unknown) and, unless progress is off or another task is running
  // (then this one joins it), starts the renderer thread. Never fails.
  Task(uint64_t items_total, uint64_t bytes_total, TaskOptions options = {});
  ~Task();  // finish()
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;

  // Counts work done; relaxed atomic adds, cheap enough per batch (engines call it once per
  // reads batch or block, not per read). For tests only: ESCPOD_TEST_PROGRESS_DELAY_US=N makes
  // each call sleep N microseconds per item, so a small input runs long enough to watch.
  void add(uint64_t items, uint64_t bytes = 0);
  // Grows the totals (inputs opened lazily, e.g. one file after another).
  void add_totals(uint64_t items, uint64_t bytes);
  // Stops the renderer and ends its output cleanly (the bar: a newline after its final state
  // and a summary line; lines: a summary line if a periodic line was printed). Idempotent.
  // A joined task only detaches.
  void finish();

  Snapshot snapshot() const;
  bool is_joined() const;  // counted into another running task

  struct State;  // implementation detail (public only so the process-wide slot can name it)

 private:
  std::shared_ptr<State> m_state;  // the shown task's counters (shared when joined)
  bool m_owner = false;
  bool m_finished = false;
  uint64_t m_delay_us = 0;
};

}  // namespace escpod::progress
