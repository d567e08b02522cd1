// ddp_bench's output: the tables and the JSON; see ddp_bench.h.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "bench/ddp_bench.h"

namespace troupe::bench::ddp {
namespace {

std::string percent(double fraction) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", fraction * 100);
  return buf;
}

void json_list(std::ostream& out, const std::vector<double>& v) {
  out << "[";
  for (size_t i = 0; i < v.size(); ++i)
    out << (i ? ", " : "") << v[i];
  out << "]";
}

}  // namespace

void print_report(const std::vector<Case>& cases, const std::string& peer, int disturbed,
                  double min_cpu) {
  // The table. hidden: counters (the stage's: 1 - exposed / comm), tail (1 - the last replica's
  // wait with overlap / without); PyTorch's is the tail kind (1 - the last rank's wait after its
  // last gradient / the allreduce alone). The step kind (the step time overlap saves / the
  // allreduce alone) is in the JSON only: on a shared machine the step times move by more than
  // the allreduce takes.
  std::printf("\n%-7s %2s %7s %10s %10s %7s %11s %18s %8s %9s\n", "config", "dp", "threads",
              "troupe", peer == "none" ? "peer" : "PyTorch", "ratio", "(min-max)",
              "troupe hidden %", "PyTorch", "overhead");
  std::printf("%-7s %2s %7s %10s %10s %7s %11s %18s %8s %9s\n", "", "", "", "samples/s",
              "samples/s", "", "", "counters/tail", "hidden %", "ms/step");
  bool ratio_met = true, any_peer = false;
  std::string hidden_goal = "-", tail_goal = "-";
  for (const Case& c : cases) {
    std::string peer_sps = "-", ratio = "-", spread = "", hidden = "-", th = "-";
    char buf[64];
    if (!c.torch.empty()) {
      any_peer = true;
      std::snprintf(buf, sizeof buf, "%.1f", c.torch_sps());
      peer_sps = buf;
      std::snprintf(buf, sizeof buf, "%.2fx", c.ratio());
      ratio = buf;
      std::vector<double> rs = c.ratios();
      std::snprintf(buf, sizeof buf, "(%.2f-%.2f)", *std::min_element(rs.begin(), rs.end()),
                    *std::max_element(rs.begin(), rs.end()));
      spread = buf;
      if (c.ratio() < 1.2) ratio_met = false;
      if (c.dp > 1 && c.torch_has_tail()) th = percent(c.torch_hidden_tail());
    }
    if (c.dp > 1) {
      hidden = percent(c.hidden_counters());
      if (hidden_goal == "-") hidden_goal = "met";
      if (c.hidden_counters() < 0.8) hidden_goal = "not met";
      if (!c.serial.empty()) {
        if (tail_goal == "-") tail_goal = "met";
        if (c.hidden_tail() < 0.8) tail_goal = "not met";
      }
      if (!c.serial.empty()) {
        hidden += "/" + percent(c.hidden_tail());
      } else {
        hidden += "/-";
      }
    }
    std::printf("%-7s %2d %7d %10.1f %10s %7s %11s %18s %8s %9.2f\n", c.mc.name.c_str(), c.dp,
                c.threads, c.troupe_sps(), peer_sps.c_str(), ratio.c_str(), spread.c_str(),
                hidden.c_str(), th.c_str(),
                Case::med(c.troupe, [](const TroupeRun& r) { return r.overhead_ms; }));
  }
  for (const Case& c : cases) {
    if (c.torch.empty())
      std::printf("%s dp %d: %s\n", c.mc.name.c_str(), c.dp, c.torch_why.c_str());
  }
  if (disturbed > 0) {
    std::printf(
        "%d runs got less than %.0f%% of their cores and ran again (or were kept, as the "
        "last attempt)\n",
        disturbed, min_cpu * 100);
  }
  std::printf(
      "goal, troupe >= 1.2x PyTorch DDP samples/s: %s; >= 80%% of the allreduce hidden: %s by "
      "the counters, %s by the tail\n",
      any_peer ? (ratio_met ? "met" : "not met") : "-", hidden_goal.c_str(), tail_goal.c_str());
  // Where the steps go (medians, ms). troupe through the controller: step, compute (forward +
  // backward, slowest replica), the longest wait for the allreduce after backward, the share of
  // the cores and CPU time per sample (all replicas; other load barely moves it, unlike wall
  // times). Replica by replica, overlap on / off: step, the last replica's wait (off: the
  // allreduce alone), the replicas' spread of compute. PyTorch: step, step under no_sync(), the
  // allreduce alone, the last rank's wait after its last gradient, its share of the cores and CPU
  // per sample.
  std::printf("\n%-7s %2s | %7s %7s %7s %5s %7s | %7s %6s %7s %6s %6s | %7s %7s %7s %6s %5s %7s\n",
              "config", "dp", "step", "compute", "exposed", "cpu", "cpu/smp", "ov.step", "ov.tail",
              "ser.step", "allred", "spread", "pt.step", "no_sync", "pt.comm", "pt.tail", "cpu",
              "cpu/smp");
  for (const Case& c : cases) {
    auto t = [&](double TroupeRun::*f) {
      return Case::med(c.troupe, [f](const TroupeRun& r) { return r.*f; });
    };
    auto o = [&](double TroupeRun::*f) {
      return c.overlapped.empty()
                 ? 0.0
                 : Case::med(c.overlapped, [f](const TroupeRun& r) { return r.*f; });
    };
    auto s = [&](double TroupeRun::*f) {
      return c.serial.empty() ? 0.0 : Case::med(c.serial, [f](const TroupeRun& r) { return r.*f; });
    };
    auto p = [&](double TorchRun::*f, double scale) {
      return c.torch.empty()
                 ? 0.0
                 : Case::med(c.torch, [f, scale](const TorchRun& r) { return r.*f * scale; });
    };
    const double samples = static_cast<double>(c.mc.B) * c.dp;
    std::printf(
        "%-7s %2d | %7.1f %7.1f %7.1f %4.0f%% %7.1f | %7.1f %6.1f %7.1f %6.1f %6.1f | %7.1f %7.1f "
        "%7.1f %6.1f %4.0f%% %7.1f\n",
        c.mc.name.c_str(), c.dp, t(&TroupeRun::step_ms), t(&TroupeRun::compute_ms),
        t(&TroupeRun::exposed_ms), t(&TroupeRun::cpu_share) * 100,
        t(&TroupeRun::cpu_ms_per_step) / samples, o(&TroupeRun::step_ms), o(&TroupeRun::tail_ms),
        s(&TroupeRun::step_ms), s(&TroupeRun::tail_ms), o(&TroupeRun::skew_ms),
        p(&TorchRun::step_s, 1e3), p(&TorchRun::nosync_step_s, 1e3),
        p(&TorchRun::comm_alone_s, 1e3), c.torch_has_tail() ? p(&TorchRun::tail_s, 1e3) : 0.0,
        p(&TorchRun::cpu_share, 100), p(&TorchRun::cpu_s_per_step, 1e3) / samples);
  }
}

bool write_ddp_json(const std::string& path, const std::string& peer,
                    const std::vector<Case>& cases) {
  std::ofstream out(path);
  if (!out) return false;
  out << "{\n  \"benchmark\": \"ddp_bench\",\n  \"peer\": \"" << json_escape(peer)
      << "\",\n  \"cases\": [\n";
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const bool multi = c.dp > 1;
    std::vector<double> troupe_sps, torch_sps, step_ms, exposed, overhead;
    for (const TroupeRun& r : c.troupe) {
      troupe_sps.push_back(r.samples_per_s());
      step_ms.push_back(r.step_ms);
      exposed.push_back(r.exposed_ms);
      overhead.push_back(r.overhead_ms);
    }
    for (const TorchRun& r : c.torch)
      torch_sps.push_back(r.samples_per_s);
    out << "    {\"name\": \"" << c.mc.name << " dp" << c.dp
        << "\", \"unit\": \"samples/s\", \"troupe\": " << c.troupe_sps()
        << ", \"peer\": " << (c.torch.empty() ? 0 : c.torch_sps()) << ", \"ratio\": " << c.ratio()
        << ", \"config\": \"" << c.mc.name << "\", \"dp\": " << c.dp
        << ", \"threads\": " << c.threads << ", \"params\": " << c.mc.params()
        << ", \"micro_batch\": " << c.mc.B << ", \"seq_len\": " << c.mc.T
        << ", \"bucket_elements\": " << c.bucket_elements << ", \"buckets\": " << c.num_buckets
        << ", \"troupe_tokens_per_s\": "
        << Case::med(c.troupe, [](const TroupeRun& r) { return r.tokens_per_s(); })
        << ", \"troupe_step_ms\": " << median(step_ms) << ", \"troupe_compute_ms\": "
        << Case::med(c.troupe, [](const TroupeRun& r) { return r.compute_ms; })
        << ", \"troupe_comm_ms\": "
        << Case::med(c.troupe, [](const TroupeRun& r) { return r.comm_ms; })
        << ", \"troupe_comm_exposed_ms\": " << median(exposed)
        << ", \"troupe_overhead_ms\": " << median(overhead) << ", \"troupe_cpu_share\": "
        << Case::med(c.troupe, [](const TroupeRun& r) { return r.cpu_share; })
        << ", \"troupe_cpu_ms_per_step\": "
        << Case::med(c.troupe, [](const TroupeRun& r) { return r.cpu_ms_per_step; });
    if (multi) {
      out << ", \"troupe_hidden_counters\": " << c.hidden_counters();
      if (!c.serial.empty()) {
        auto o = [&](double TroupeRun::*f) {
          return Case::med(c.overlapped, [f](const TroupeRun& r) { return r.*f; });
        };
        auto se = [&](double TroupeRun::*f) {
          return Case::med(c.serial, [f](const TroupeRun& r) { return r.*f; });
        };
        out << ", \"ref_overlap_step_ms\": " << o(&TroupeRun::step_ms)
            << ", \"ref_overlap_compute_ms\": " << o(&TroupeRun::compute_ms)
            << ", \"ref_overlap_tail_ms\": " << o(&TroupeRun::tail_ms)
            << ", \"ref_overlap_skew_ms\": " << o(&TroupeRun::skew_ms)
            << ", \"ref_serial_step_ms\": " << se(&TroupeRun::step_ms)
            << ", \"ref_serial_compute_ms\": " << se(&TroupeRun::compute_ms)
            << ", \"ref_serial_allreduce_ms\": " << c.serial_ms()
            << ", \"ref_serial_skew_ms\": " << se(&TroupeRun::skew_ms)
            << ", \"troupe_hidden_tail\": " << c.hidden_tail()
            << ", \"troupe_hidden_step\": " << c.hidden_step();
      }
    }
    if (!c.torch.empty()) {
      out << ", \"peer_step_ms\": "
          << Case::med(c.torch, [](const TorchRun& r) { return r.step_s * 1e3; })
          << ", \"peer_cpu_share\": "
          << Case::med(c.torch, [](const TorchRun& r) { return r.cpu_share; })
          << ", \"peer_cpu_ms_per_step\": "
          << Case::med(c.torch, [](const TorchRun& r) { return r.cpu_s_per_step * 1e3; });
      if (multi) {
        out << ", \"peer_nosync_step_ms\": "
            << Case::med(c.torch, [](const TorchRun& r) { return r.nosync_step_s * 1e3; })
            << ", \"peer_comm_alone_ms\": "
            << Case::med(c.torch, [](const TorchRun& r) { return r.comm_alone_s * 1e3; })
            << ", \"peer_hidden_step\": " << c.torch_hidden();
        if (c.torch_has_tail()) {
          out << ", \"peer_tail_ms\": "
              << Case::med(c.torch, [](const TorchRun& r) { return r.tail_s * 1e3; })
              << ", \"peer_hidden_tail\": " << c.torch_hidden_tail();
        }
      }
    } else {
      out << ", \"peer_skipped\": \"" << json_escape(c.torch_why) << "\"";
    }
    out << ", \"troupe_samples_per_s_runs\": ";
    json_list(out, troupe_sps);
    out << ", \"peer_samples_per_s_runs\": ";
    json_list(out, torch_sps);
    out << ", \"ratio_runs\": ";
    json_list(out, c.ratios());
    std::vector<double> troupe_cpu, peer_cpu;
    for (const TroupeRun& r : c.troupe)
      troupe_cpu.push_back(r.cpu_share);
    for (const TorchRun& r : c.torch)
      peer_cpu.push_back(r.cpu_share);
    out << ", \"troupe_cpu_share_runs\": ";
    json_list(out, troupe_cpu);
    out << ", \"peer_cpu_share_runs\": ";
    json_list(out, peer_cpu);
    out << "}" << (i + 1 < cases.size() ? "," : "") << "\n";
  }
  out << "  ]\n}\n";
  return static_cast<bool>(out);
}

}  // namespace troupe::bench::ddp
