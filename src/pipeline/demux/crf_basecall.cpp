// `escpod demux basecall` (crf_basecall.hpp).
#include "escpod/pipeline/demux/crf_basecall.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "escpod/demux/crf_model.hpp"
#include "escpod/demux/head.hpp"
#include "pipeline/demux/boundary_rows.hpp"
#include "pipeline/demux/classifications_csv.hpp"
#include "pipeline/demux/read_featurize.hpp"
#include "pipeline/ops/csv_text.hpp"
#include "pipeline/ops/read_stream.hpp"

namespace escpod::pipeline {
namespace {

using detail::ReadBlock;
using detail::ReadTask;

struct Out {
  demux::Classification call;
  std::string sequence, reference, crf_best;
  std::string reason;  // why no call (empty: the head ran)
};

struct Scratch {
  detail::DecodeScratch decode;
  std::vector<std::vector<float>> pa;         // per read of a block: one classify() reads them all
  std::vector<demux::PreparedRead> prepared;  // the block's reads with signal, in order
  std::vector<size_t> task_of;                // their positions in the block
  std::vector<demux::Classification> calls;
  std::unique_ptr<demux::HeadScratch> head;
};

// The fused run's decode step (the samples the head reads, not the detector's prefix) into `pa`,
// and what the head reads (prepare_for_head) from the table's boundaries into *r; false
// (t.out.reason says why) when the read has no signal the head can use.
bool prepare_read(const demux::Head& head, const demux::HeadInput& input, const BoundaryRow& br,
                  ReadTask<Out>& t, detail::DecodeScratch& decode, std::vector<float>& pa, demux::PreparedRead* r) {
  const auto need = static_cast<uint64_t>(std::max<int64_t>(0, demux::crf_samples_needed(head, br.adapter_end)));
  if (!detail::decode_read_prefix(*t.file, *t.batch, t.row, static_cast<size_t>(need), decode, pa, t.out.reason)) {
    return false;
  }
  *r = detail::prepare_for_head(input, pa, t.batch->num_samples[t.row], detail::row_boundaries(br), {});
  return true;
}

// Calls a block's reads with one classify(), so that reads share encoder calls where the head
// batches windows of several reads (CrfHeadOptions::max_window_batch).
void call_block(const demux::Head& head, const BoundariesTable& boundaries, ReadBlock<Out>& block, Scratch& w) {
  if (w.pa.size() < block.reads.size()) w.pa.resize(block.reads.size());
  const demux::HeadInput input = head.input();
  w.prepared.clear();
  w.task_of.clear();
  for (size_t i = 0; i < block.reads.size(); ++i) {
    ReadTask<Out>& t = block.reads[i];
    demux::PreparedRead r;
    if (prepare_read(head, input, boundaries.rows[t.tag], t, w.decode, w.pa[i], &r)) {
      w.prepared.push_back(r);
      w.task_of.push_back(i);
    }
  }
  w.calls.resize(w.prepared.size());
  head.classify(w.prepared, *w.head, w.calls);
  for (size_t k = 0; k < w.prepared.size(); ++k) {
    Out& out = block.reads[w.task_of[k]].out;
    std::swap(out.call, w.calls[k]);
    if (auto c = demux::crf_read_call(*w.head, k)) {
      out.sequence.assign(c->sequence);
      out.reference.assign(c->reference);
      out.crf_best.assign(c->crf_best);
    } else {
      out.reason = std::string(out.call.reason());
    }
  }
}

// The classifications table's row of `t` (classifications_csv.hpp), then its decoded sequence.
void append_basecall_row(std::string& line, const detail::ClassificationsCsv& table, const pod5::ReadId& id,
                         const BoundaryRow& br, Out& o) {
  if (o.reason.empty() && !o.call.is_classified()) o.reason.assign(o.call.reason());
  const std::string label = table.row_label(o.call, o.reason);
  table.append_row(line, id, label, o.call, detail::RowBoundaries{br.adapter_start, br.adapter_end, ""}, o.reason);
  line.pop_back();  // the row's '\n'
  line += ',';
  line += o.sequence;
  line += '\n';
}

}  // namespace

Status basecall_from_boundaries(const std::vector<std::filesystem::path>& inputs,
                                const BoundariesTable& boundaries, const RunModel& model,
                                const CrfBasecallOptions& options, std::ostream& csv, CrfBasecallReport* report) {
  const auto t0 = std::chrono::steady_clock::now();
  ESCPOD_RETURN_IF_ERROR(require_head_input(model, demux::HeadInputKind::kSignalWindow, "demux basecall"));
  const demux::Head& head = model.head();
  ESCPOD_ASSIGN_OR_RETURN(auto readers, detail::open_readers(inputs, options.n_threads));
  CrfBasecallReport local;
  CrfBasecallReport& rep = report ? *report : local;
  rep.n_boundaries = boundaries.rows.size();
  rep.n_dropped = boundaries.n_dropped;
  detail::BoundaryRowIndex wanted(boundaries);
  const detail::ClassificationsCsv table(head);
  csv << table.header().substr(0, table.header().size() - 1) << ",decoded_seq\n";
  std::string line;
  Status s = detail::for_each_read_ordered<Out, Scratch>(
      readers, options.n_threads, /*block_size=*/4,
      [&](const pod5::ReadBatch& b, size_t row, size_t* tag) { return wanted.select(b.read_id[row], tag); },
      [&] {
        Scratch w;
        w.head = head.make_scratch();
        return w;
      },
      [&](ReadBlock<Out>& block, Scratch& w) { call_block(head, boundaries, block, w); },
      [&](ReadTask<Out>& t) -> Status {
        line.clear();
        append_basecall_row(line, table, t.batch->read_id[t.row], boundaries.rows[t.tag], t.out);
        csv << line;
        ++rep.n_rows;
        if (t.out.reason.empty()) ++rep.n_classified;
        else ++rep.unclassified_reasons[t.out.reason];
        if (!csv) return Status::io_error("basecall: writing the CSV failed");
        return Status::ok();
      });
  ESCPOD_RETURN_IF_ERROR(s);
  rep.n_not_in_inputs = wanted.n_unseen();
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::ok();
}


}  // namespace escpod::pipeline
