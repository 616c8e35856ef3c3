#include "escpod/core/progress.hpp"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "escpod/core/log.hpp"

namespace escpod::progress {
namespace {

using Clock = std::chrono::steady_clock;

// Process-wide like the log level: there is one stderr.
std::atomic<int> g_mode{static_cast<int>(Mode::kOff)};
std::string g_default_label;

// A bar appears only once a task has run this long, so quick commands print nothing.
constexpr double kBarDelayS = 0.5;
constexpr auto kBarTick = std::chrono::milliseconds(200);

Mode env_mode(Mode asked) {
  const char* env = std::getenv("ESCPOD_PROGRESS");
  if (env == nullptr) return asked;
  const std::string_view v(env);
  if (v == "off" || v == "0") return Mode::kOff;
  if (v == "bar") return Mode::kBar;
  if (v == "lines") return Mode::kLines;
  if (v == "auto") return Mode::kAuto;
  return asked;
}

double env_interval_s() {
  if (const char* env = std::getenv("ESCPOD_PROGRESS_INTERVAL")) {
    char* end = nullptr;
    double v = std::strtod(env, &end);
    if (end != env && v > 0) return v;
  }
  return 10.0;
}

int terminal_width() {
  winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* env = std::getenv("COLUMNS")) {
    int c = std::atoi(env);
    if (c > 0) return c;
  }
  return 80;
}

std::string rate_text(const Snapshot& s) {
  if (s.elapsed_s <= 0) return {};
  const double r = static_cast<double>(s.items_done) / s.elapsed_s;
  if (r >= 100) return fmt::format("{} {}/s", format_count(static_cast<uint64_t>(r + 0.5)), s.unit);
  return fmt::format("{:.1f} {}/s", r, s.unit);
}

std::string items_text(const Snapshot& s) {
  if (s.items_total > 0) {
    return fmt::format("{}/{} {}", format_count(s.items_done), format_count(s.items_total), s.unit);
  }
  return fmt::format("{} {}", format_count(s.items_done), s.unit);
}

// Empty when there is nothing to say about bytes.
std::string bytes_text(const Snapshot& s) {
  if (s.bytes_total > 0) return format_bytes(s.bytes_done) + "/" + format_bytes(s.bytes_total);
  if (s.bytes_done > 0) return format_bytes(s.bytes_done);
  return {};
}

}  // namespace

void set_mode(Mode mode) { g_mode.store(static_cast<int>(mode), std::memory_order_relaxed); }
Mode mode() { return static_cast<Mode>(g_mode.load(std::memory_order_relaxed)); }
void set_default_label(std::string label) { g_default_label = std::move(label); }

double fraction_done(const Snapshot& s) {
  if (s.bytes_total > 0) return std::min(1.0, static_cast<double>(s.bytes_done) / static_cast<double>(s.bytes_total));
  if (s.items_total > 0) return std::min(1.0, static_cast<double>(s.items_done) / static_cast<double>(s.items_total));
  return -1;
}

double seconds_left(const Snapshot& s) {
  const double f = fraction_done(s);
  if (f <= 0 || f >= 1 || s.elapsed_s <= 0) return -1;
  return s.elapsed_s * (1 - f) / f;
}

std::string format_duration(double seconds) {
  const auto t = static_cast<uint64_t>(std::max(0.0, std::round(seconds)));
  if (t < 60) return fmt::format("{}s", t);
  if (t < 3600) return fmt::format("{}:{:02}", t / 60, t % 60);
  return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
}

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1000) return fmt::format("{} B", bytes);
  static constexpr const char* kUnits[] = {"kB", "MB", "GB", "TB", "PB", "EB"};
  double v = static_cast<double>(bytes) / 1000;
  size_t u = 0;
  // Round first so that 999.96 kB is shown as 1.00 MB, not 1000 kB.
  while (u + 1 < std::size(kUnits) && std::round(v * 100) / 100 >= 999.5) {
    v /= 1000;
    ++u;
  }
  if (v < 9.995) return fmt::format("{:.2f} {}", v, kUnits[u]);
  if (v < 99.95) return fmt::format("{:.1f} {}", v, kUnits[u]);
  return fmt::format("{:.0f} {}", v, kUnits[u]);
}

std::string format_count(uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  out.reserve(digits.size() + digits.size() / 3);
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string format_bar(const Snapshot& s, int width) {
  const double f = fraction_done(s);
  const double left = seconds_left(s);
  // Fields after the bar, most useful first; dropped from the end until the line fits.
  std::vector<std::string> fields;
  if (f >= 0) fields.push_back(fmt::format("{:3.0f}%", std::floor(f * 100)));
  fields.push_back(items_text(s));
  const std::string left_text = left >= 0 ? fmt::format("~{} left", format_duration(left)) : std::string();
  if (!left_text.empty()) fields.push_back(left_text);
  if (auto b = bytes_text(s); !b.empty()) fields.push_back(b);
  if (auto r = rate_text(s); !r.empty()) fields.push_back(r);
  fields.push_back(format_duration(s.elapsed_s));
  // Display order: percent, items, bytes, rate, elapsed, time left.
  auto render = [&](size_t n_fields, int bar_cols) {
    std::string line = s.label;
    if (bar_cols > 0 && f >= 0) {
      const int filled = static_cast<int>(f * bar_cols);
      line += " [";
      line.append(static_cast<size_t>(filled), '#');
      if (filled < bar_cols) {
        line += '>';
        line.append(static_cast<size_t>(bar_cols - filled - 1), ' ');
      }
      line += ']';
    }
    std::vector<const std::string*> shown;
    for (size_t i = 0; i < n_fields; ++i) shown.push_back(&fields[i]);
    // Move the time left to the end of the line, where people look for it.
    std::stable_partition(shown.begin(), shown.end(), [&](const std::string* p) { return *p != left_text; });
    for (const std::string* p : shown) {
      line += ' ';
      line += *p;
    }
    return line;
  };
  // Keep the bar (at least 10 columns) while dropping fields; then drop the bar too.
  for (size_t n = fields.size(); n >= 1; --n) {
    const int text = static_cast<int>(render(n, 0).size());
    if (f < 0 && text <= width) return render(n, 0);
    if (f >= 0 && width - text - 3 >= 10) return render(n, std::min(width - text - 3, 30));
  }
  for (size_t n = fields.size(); n >= 1; --n) {
    std::string line = render(n, 0);
    if (static_cast<int>(line.size()) <= width) return line;
  }
  std::string line = render(1, 0);
  line.resize(static_cast<size_t>(std::max(0, width)));
  return line;
}

std::string format_line(const Snapshot& s) {
  std::string line = s.label + ": " + items_text(s);
  const double f = fraction_done(s);
  if (f >= 0) line += fmt::format(" ({:.1f}%)", f * 100);
  if (auto b = bytes_text(s); !b.empty()) line += ", " + b;
  if (auto r = rate_text(s); !r.empty()) line += ", " + r;
  line += ", " + format_duration(s.elapsed_s) + " elapsed";
  if (double left = seconds_left(s); left >= 0) line += fmt::format(", ~{} left", format_duration(left));
  return line;
}

std::string format_summary(const Snapshot& s) {
  const double f = fraction_done(s);
  std::string line = s.label + (f < 0 || f >= 1 ? ": done, " : fmt::format(": stopped at {:.1f}%, ", f * 100)) +
                     format_count(s.items_done) + " " + s.unit;
  if (s.bytes_done > 0) line += ", " + format_bytes(s.bytes_done);
  line += " in " + format_duration(s.elapsed_s);
  if (auto r = rate_text(s); !r.empty()) line += " (" + r + ")";
  return line;
}

// ---- tasks ----------------------------------------------------------------------------------

struct Task::State {
  std::string label;
  std::string unit;
  Clock::time_point start = Clock::now();
  std::atomic<uint64_t> items_done{0};
  std::atomic<uint64_t> items_total{0};
  std::atomic<uint64_t> bytes_done{0};
  std::atomic<uint64_t> bytes_total{0};
  // Totals declared unknown by the owner: joined tasks fill them.
  bool items_open = false;
  bool bytes_open = false;

  Mode mode = Mode::kOff;
  double interval_s = 10;
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;  // guarded by mutex
  bool drew = false;  // written by the renderer; read after it is joined
  std::thread renderer;

  Snapshot snapshot() const {
    Snapshot s;
    s.label = label;
    s.unit = unit;
    s.items_done = items_done.load(std::memory_order_relaxed);
    s.items_total = items_total.load(std::memory_order_relaxed);
    s.bytes_done = bytes_done.load(std::memory_order_relaxed);
    s.bytes_total = bytes_total.load(std::memory_order_relaxed);
    s.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
    return s;
  }

  void render_loop() {
    std::unique_lock lock(mutex);
    if (mode == Mode::kBar) {
      const auto first = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kBarDelayS));
      if (wake.wait_until(lock, first, [&] { return stop; })) return;
      for (;;) {
        log::draw_status_line(format_bar(snapshot(), terminal_width() - 1));
        drew = true;
        if (wake.wait_for(lock, kBarTick, [&] { return stop; })) return;
      }
    }
    const auto tick = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval_s));
    for (auto next = start + tick;; next += tick) {
      if (wake.wait_until(lock, next, [&] { return stop; })) return;
      log::write_raw("escpod: " + format_line(snapshot()) + "\n");
      drew = true;
    }
  }
};

namespace {
std::mutex g_active_mutex;
std::shared_ptr<Task::State> g_active;  // guarded by g_active_mutex: the task being shown
}  // namespace

Task::Task(uint64_t items_total, uint64_t bytes_total, TaskOptions options) {
  if (const char* env = std::getenv("ESCPOD_TEST_PROGRESS_DELAY_US")) m_delay_us = std::strtoull(env, nullptr, 10);
  // Fully built before it is published, so a task joining it from another thread sees it whole.
  auto fresh = std::make_shared<State>();
  State& st = *fresh;
  st.label = !options.label.empty() ? std::move(options.label) : g_default_label.empty() ? "escpod" : g_default_label;
  st.unit = std::move(options.unit);
  st.items_total = items_total;
  st.bytes_total = bytes_total;
  st.items_open = items_total == 0;
  st.bytes_open = bytes_total == 0;
  Mode m = env_mode(mode());
  if (m == Mode::kAuto) m = ::isatty(STDERR_FILENO) ? Mode::kBar : Mode::kLines;
  st.mode = m;
  st.interval_s = env_interval_s();
  {
    std::lock_guard lock(g_active_mutex);
    if (g_active) {
      m_state = g_active;
    } else {
      m_state = g_active = std::move(fresh);
      m_owner = true;
    }
  }
  if (!m_owner) {
    add_totals(items_total, bytes_total);
    return;
  }
  if (m != Mode::kOff) m_state->renderer = std::thread([s = m_state] { s->render_loop(); });
}

Task::~Task() { finish(); }

void Task::add(uint64_t items, uint64_t bytes) {
  // The test delay stands for the work: it passes before the items count as done.
  if (m_delay_us && items) std::this_thread::sleep_for(std::chrono::microseconds(m_delay_us * items));
  m_state->items_done.fetch_add(items, std::memory_order_relaxed);
  if (bytes) m_state->bytes_done.fetch_add(bytes, std::memory_order_relaxed);
}

void Task::add_totals(uint64_t items, uint64_t bytes) {
  State& st = *m_state;
  if (m_owner || st.items_open) st.items_total.fetch_add(items, std::memory_order_relaxed);
  if (m_owner || st.bytes_open) st.bytes_total.fetch_add(bytes, std::memory_order_relaxed);
}

void Task::finish() {
  if (m_finished) return;
  m_finished = true;
  if (!m_owner) return;
  State& st = *m_state;
  if (st.renderer.joinable()) {
    {
      std::lock_guard lock(st.mutex);
      st.stop = true;
    }
    st.wake.notify_all();
    st.renderer.join();
    if (st.drew) {
      const Snapshot s = st.snapshot();
      const std::string summary = "escpod: " + format_summary(s) + "\n";
      if (st.mode == Mode::kBar) {
        log::draw_status_line(format_bar(s, terminal_width() - 1), "\n" + summary);
      } else {
        log::write_raw(summary);
      }
    }
  }
  std::lock_guard lock(g_active_mutex);
  if (g_active == m_state) g_active.reset();
}

Snapshot Task::snapshot() const { return m_state->snapshot(); }
bool Task::is_joined() const { return !m_owner; }

}  // namespace escpod::progress
