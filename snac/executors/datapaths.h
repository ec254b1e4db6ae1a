// The datapaths of this build, behind one seam: each entry says where it applies, makes its policy
// and makes its executor. A communicator runs on the first entry that applies to it, in the order
// of datapaths(); the entries that do not apply say why at INFO. Adding a datapath is a folder in
// atom/, its executor file (which defines the entry) and one line in datapaths.cc.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "snac/executor.h"
#include "snac/runtime/policy.h"

namespace purlin::snac {

// Where a communicator runs, as every rank of it agrees.
struct Site {
  int device = -1;   // this rank's CUDA device (-1: none, host buffers)
  int nranks = 1;
  int sharing = 1;   // the most ranks on any one GPU
};

struct Datapath {
  const char* name;  // as policy files, logs and benchmarks name it
  // Whether it serves a communicator at `site`; if not, *why says so.
  bool (*applies)(const Site& site, std::string* why);
  // Its policy there: its recipe in the regime of the site's GPU.
  Policy (*policy)(const Site& site);
  Status (*make)(const ExecutorArgs& args, std::unique_ptr<Executor>* out);
};

// Every datapath of this build, in order of preference.
std::span<const Datapath* const> datapaths();
// The datapath called `name`, or null.
const Datapath* find_datapath(std::string_view name);

// The executors' factories. The host datapath: ranks on one host share memory (memfd descriptors);
// threads stand in for CTAs. The SM datapath: windows in device memory shared through CUDA IPC,
// roles run by CTAs; args.policy.workers is the number of channels (CTAs per role).
Status make_host_executor(const ExecutorArgs& args, std::unique_ptr<Executor>* out);
Status make_sm_executor(const ExecutorArgs& args, std::unique_ptr<Executor>* out);
// How many CTAs of the SM datapath's kernels one multiprocessor of `device` holds at once (the least
// over all collectives); 0 without a GPU datapath.
int sm_resident_ctas_per_sm(int device);
// The same for the zero-staging kernels, whose CTAs of every rank sharing the GPU must be resident
// together; 0 without a GPU datapath.
int zero_staging_resident_ctas_per_sm(int device);

// The entries and policy recipes, each defined beside its executor.
const Datapath& sm_datapath();
const Datapath& host_datapath();
const PolicyRecipe& sm_policy_recipe();
const PolicyRecipe& host_policy_recipe();

}  // namespace purlin::snac
