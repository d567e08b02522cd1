// The head's dashboard (GET / on its HTTP port): one self-contained HTML page - its script and
// styles inline, its charts SVG drawn by the script, nothing fetched from elsewhere - that reads
// /api/status and /api/jobs/ID every two seconds and shows the cluster (nodes, actors by state,
// placement groups, jobs, recent events) and the selected job (#job=ID, else the newest
// running): its loss and validation loss, throughput, step time and its parts, the latest
// values, memory and bytes sent per rank, and its events.
#pragma once

#include <string_view>

namespace troupe::cluster {

std::string_view dashboard_page();

}  // namespace troupe::cluster
