#include "bench/collective_bench_report.h"

#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace troupe::bench::collective {
namespace {

constexpr Library kPeers[] = {Library::kGloo, Library::kMpi};
constexpr size_t kLatency = 0;  // the key samples() reads the latency under

// Seconds per allreduce in each run (bytes == kLatency: the 8-byte latency);
// empty when the library did not run.
std::vector<double> samples(const Report& report, int ranks, Library library, size_t bytes) {
  std::vector<double> out;
  auto it = report.runs.find({ranks, library});
  if (it == report.runs.end()) return out;
  for (const RankFigures& f : it->second) {
    if (bytes == kLatency) {
      out.push_back(f.latency);
    } else if (auto s = f.seconds.find(bytes); s != f.seconds.end()) {
      out.push_back(s->second);
    }
  }
  return out;
}

// algbw in GB/s of the median time, or 0 without samples.
double algbw(const Report& report, int ranks, Library library, size_t bytes) {
  double seconds = median(samples(report, ranks, library, bytes));
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0;
}

double ratio(double a, double b) {
  return a > 0 && b > 0 ? a / b : 0;
}

std::string size_label(size_t bytes) {
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) {
    return absl::StrCat(bytes >> 20, " MiB");
  }
  if (bytes >= 1024 && bytes % 1024 == 0) return absl::StrCat(bytes >> 10, " KiB");
  return absl::StrCat(bytes, " B");
}

// v right-aligned in `width` with `suffix`, or "-" when v is 0 (not
// measured): `decimals` decimal places or, when decimals is negative, three
// significant digits (bandwidths span 1e-4 to 10 GB/s, ratios 0.01 to 500).
std::string cell(double v, int width, const char* suffix = "", int decimals = -1) {
  char buf[64];
  const int w = width - static_cast<int>(std::strlen(suffix));
  if (v >= 100 && decimals < 0) {
    std::snprintf(buf, sizeof(buf), "%*.0f%s", w, v, suffix);
  } else if (v > 0 && decimals < 0) {
    std::snprintf(buf, sizeof(buf), "%*.3g%s", w, v, suffix);
  } else if (v > 0) {
    std::snprintf(buf, sizeof(buf), "%*.*f%s", w, decimals, v, suffix);
  } else {
    std::snprintf(buf, sizeof(buf), "%*s", width, "-");
  }
  return buf;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string number(double v) {
  return v > 0 ? absl::StrCat(v) : "null";
}

}  // namespace

void print_report(const Report& report, const std::vector<int>& rank_counts) {
  for (const auto& [library, why] : report.dropped)
    std::printf("%s: dropped after a failed run (%s)\n", name_of(library), why.c_str());
  for (int n : rank_counts) {
    std::printf(
        "\n%s fp32 sum, %d ranks (processes on this host); troupe over %s, algorithm %s; "
        "median of %d runs\nGB/s = 1e9 B/s; busbw = algbw x %s; ratios compare busbw, "
        "above 1: troupe faster\n",
        name_of(report.plan.op), n, report.transport.c_str(), report.algorithm.c_str(),
        report.repeat, report.plan.op == Op::kAllreduce ? "2(n-1)/n" : "(n-1)/n");
    std::printf("%10s %6s %13s %13s %11s %11s %12s %11s\n", "size", "iters", "troupe algbw",
                "troupe busbw", "gloo busbw", "mpi busbw", "troupe/gloo", "troupe/mpi");
    for (size_t bytes : report.plan.sizes) {
      double troupe = algbw(report, n, Library::kTroupe, bytes);
      double gloo = algbw(report, n, Library::kGloo, bytes);
      double mpi = algbw(report, n, Library::kMpi, bytes);
      double f = bus_factor(report.plan.op, n);
      std::printf("%10s %6ld %s %s %s %s %s %s\n", size_label(bytes).c_str(),
                  timed_iterations(report.plan, bytes), cell(troupe, 13).c_str(),
                  cell(troupe * f, 13).c_str(), cell(gloo * f, 11).c_str(),
                  cell(mpi * f, 11).c_str(), cell(ratio(troupe, gloo), 12, "x").c_str(),
                  cell(ratio(troupe, mpi), 11, "x").c_str());
    }
    double troupe_us = median(samples(report, n, Library::kTroupe, kLatency)) * 1e6;
    std::printf("%zu B allreduce latency, us (lower is better): troupe %s", kLatencyBytes,
                cell(troupe_us, 1, "", 2).c_str());
    for (Library peer : kPeers)
      std::printf(", %s %s", name_of(peer),
                  cell(median(samples(report, n, peer, kLatency)) * 1e6, 1, "", 2).c_str());
    std::printf("\n  peer/troupe:");
    for (Library peer : kPeers) {
      double peer_us = median(samples(report, n, peer, kLatency)) * 1e6;
      std::printf(" %s %s", name_of(peer), cell(ratio(peer_us, troupe_us), 1, "x").c_str());
    }
    std::printf(" (above 1: troupe faster)\n");
  }
  std::fflush(stdout);
}

bool write_report_json(const std::string& path, const Report& report,
                       const std::vector<int>& rank_counts) {
  constexpr Library kAll[] = {Library::kTroupe, Library::kGloo, Library::kMpi};
  std::ofstream out(path);
  if (!out) return false;
  out << "{\n  \"benchmark\": \"collective_bench\",\n  \"collective\": \""
      << name_of(report.plan.op) << "\",\n"
      << "  \"dtype\": \"float32\",\n  \"op\": \"sum\",\n  \"transport\": \"" << report.transport
      << "\",\n  \"algorithm\": \"" << report.algorithm << "\",\n  \"repeat\": " << report.repeat
      << ",\n  \"units\": {\"seconds\": \"per operation, slowest rank\", \"algbw\": \"GB/s\", "
      << "\"busbw\": \"GB/s\", \"latency\": \"us\"},\n  \"dropped\": {";
  const char* sep = "";
  for (const auto& [library, why] : report.dropped) {
    out << sep << "\"" << name_of(library) << "\": " << json_string(why);
    sep = ", ";
  }
  out << "},\n  \"groups\": [\n";
  for (size_t g = 0; g < rank_counts.size(); ++g) {
    const int n = rank_counts[g];
    out << "    {\"ranks\": " << n << ", \"sizes\": [\n";
    for (size_t i = 0; i < report.plan.sizes.size(); ++i) {
      const size_t bytes = report.plan.sizes[i];
      out << "      {\"bytes\": " << bytes
          << ", \"iterations\": " << timed_iterations(report.plan, bytes);
      for (Library library : kAll) {
        std::vector<double> s = samples(report, n, library, bytes);
        out << ", \"" << name_of(library) << "\": ";
        if (s.empty()) {
          out << "null";
          continue;
        }
        double a = algbw(report, n, library, bytes);
        out << "{\"seconds\": [";
        for (size_t k = 0; k < s.size(); ++k)
          out << (k ? ", " : "") << s[k];
        out << "], \"algbw\": " << number(a)
            << ", \"busbw\": " << number(a * bus_factor(report.plan.op, n)) << "}";
      }
      double troupe = algbw(report, n, Library::kTroupe, bytes);
      out << ", \"troupe_over_gloo\": "
          << number(ratio(troupe, algbw(report, n, Library::kGloo, bytes)))
          << ", \"troupe_over_mpi\": "
          << number(ratio(troupe, algbw(report, n, Library::kMpi, bytes))) << "}"
          << (i + 1 < report.plan.sizes.size() ? "," : "") << "\n";
    }
    out << "    ], \"latency_bytes\": " << kLatencyBytes << ", \"latency\": {";
    double troupe_us = median(samples(report, n, Library::kTroupe, kLatency)) * 1e6;
    for (Library library : kAll) {
      double us = median(samples(report, n, library, kLatency)) * 1e6;
      out << (library == Library::kTroupe ? "" : ", ") << "\"" << name_of(library)
          << "_us\": " << number(us);
      if (library != Library::kTroupe) {
        out << ", \"" << name_of(library) << "_over_troupe\": " << number(ratio(us, troupe_us));
      }
    }
    out << "}}" << (g + 1 < rank_counts.size() ? "," : "") << "\n";
  }
  out << "  ]\n}\n";
  return static_cast<bool>(out);
}

}  // namespace troupe::bench::collective
