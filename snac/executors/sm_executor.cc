// The SM datapath bound to SNAC: windows in device memory shared through CUDA IPC (or plain
// pointers between ranks of one process), the protocol's roles run by CTAs of one kernel per call
// (sm_kernel.cu).
//
// A call is cut into `channels` independent slices; each slice runs the whole protocol with its own
// window region and LocalState, one CTA per role. Every rank's CTAs must be resident together (they
// spin on each other), which the policy's channel count keeps true when several ranks share a GPU.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <atomic>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "atom/reduce.h"
#include "collectives/geometry.h"
#include "core/config.h"
#include "core/cuda_memory.h"
#include "core/fd_passing.h"
#include "core/log.h"
#include "snac/executors/datapaths.h"
#include "snac/executors/kernel_list.h"
#include "snac/executors/sm_exchange.h"
#include "snac/executors/sm_kernel.h"
#include "snac/executors/sm_pair_board.h"
#include "snac/executors/sm_peer_buffers.h"
#include "snac/executors/sm_pair.h"
#include "snac/executors/ce_copies.h"
#include "snac/executors/sm_zero_staging.h"
#include "snac/protocol/exchange.h"
#include "snac/protocol/pair_exchange.h"

namespace purlin::snac {
namespace {

// The calling thread's current device, put back when this goes (suspend and resume run on the
// caller's thread, as NCCL's keep its device).
struct CurrentDevice {
  int device = -1;
  CurrentDevice() {
    if (cudaGetDevice(&device) != cudaSuccess) device = -1;
  }
  ~CurrentDevice() {
    if (device >= 0) cudaSetDevice(device);
  }
};

// Collective: every rank's `local` outcome of a step that may fail on one rank alone; the first
// failure of any rank, so that all go on or all stop together instead of some waiting for the rest.
Status agree(Bootstrap& boot, Status local) {
  const auto mine = static_cast<std::int32_t>(local);
  std::vector<std::int32_t> all(static_cast<std::size_t>(boot.nranks()));
  PURLIN_TRY(boot.all_gather(&mine, sizeof(mine), all.data()));
  for (int r = 0; r < boot.nranks(); ++r)
    if (all[r] != 0)
      return r == boot.rank() ? local : fail(static_cast<Status>(all[r]), fmt::format("rank {} failed to go on", r));
  return Status::ok;
}

class SmExecutor final : public Executor {
 public:
  ~SmExecutor() override {
    cuda::set_device(device_);  // the destroying thread may have another device current
    if (last_stream_used_) cudaDeviceSynchronize();
    peers_.reset();
    board_.reset();
    if (side_) cudaStreamDestroy(side_);
    if (fork_) cudaEventDestroy(fork_);
    if (join_) cudaEventDestroy(join_);
    cuda::free(zs_calls_);
    cuda::free(leg_calls_);
    for (void* p : imported_) cuda::ipc_close(p);
    for (cuda::VmmMapping& m : imported_vmm_) cuda::vmm_free(&m);
    if (own_vmm_.ptr) cuda::vmm_free(&own_vmm_);
    else cuda::free(window_);
    cuda::free(windows_dev_);
    cuda::free(state_);
    cuda::free(scratch_);
    cuda::free(done_);
    cuda::free(inbox_dev_);
    cuda::free(exchange_epoch_);
    cuda::free(pbox_dev_);
    cuda::free(acks_dev_);
    cuda::free(pair_sent_);
    cuda::free(pair_taken_);
    write_stamps();
    cuda::free(stamps_);
    cuda::free(zs_stamps_);
    if (copy_) cudaFree(copy_);
    for (void* p : retired_) cudaFree(p);
    cuda::host_mapped_free(flags_host_);
  }

  Status init(const ExecutorArgs& args, int channels) {
    Bootstrap& boot = *args.bootstrap;
    policy_ = args.policy;
    device_ = args.device;
    channels_ = channels;
    const int n = boot.nranks(), me = boot.rank();
    if (n > kMaxRanks)
      return fail(Status::invalid_usage, fmt::format("the SM datapath serves at most {} ranks (asked for {})", kMaxRanks, n));
    PURLIN_TRY(cuda::set_device(device_));
    PURLIN_TRY(load_kernels(device_));
    geo_ = WindowGeometry::make(n, policy_.staging_half, policy_.packets_per_pair);
    // The latency exchange's boxes follow the channels' windows in the same allocation.
    exchange_off_ = geo_.total * channels_;
    if (policy_.exchange_max_bytes) {
      // A box holds the largest slice of any message the exchange takes.
      box_packets_ = box_packets_for(policy_.exchange_max_bytes, exchange_channels_for(policy_.exchange_max_bytes));
      exchange_bytes_ = sizeof(atom::LLPacket) * box_packets_ * exchange_boxes(n) *
                        static_cast<std::uint64_t>(policy_.exchange_channels);
    }
    // The pair exchange's boxes and ack words follow (Send/Recv rounds, snac/protocol/pair_exchange.h),
    // kDepth boxes per producer and channel, each holding a channel's slice of the largest message it
    // takes.
    pair_off_ = exchange_off_ + exchange_bytes_;
    if (policy_.pair_max_bytes && n <= kPairMaxRanks) {
      const std::uint64_t most = policy_.pair_max_bytes;
      pair_box_packets_ = box_packets_for(most, pair_channels(most, policy_.exchange_channel_bytes, policy_.exchange_channels));
      pair_bytes_ = sizeof(atom::LLPacket) * pair_box_packets_ * pair_boxes(n) * static_cast<std::uint64_t>(policy_.exchange_channels);
      acks_off_ = pair_off_ + pair_bytes_;
      pair_bytes_ += sizeof(std::uint64_t) * static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(policy_.exchange_channels);
    }
    // Zero-staging's barrier words follow: the collectives', then Send/Recv's leg words.
    zs_off_ = (pair_off_ + pair_bytes_ + 4095) / 4096 * 4096;
    legs_off_ = zs_off_ + sizeof(std::uint64_t) * kZeroStagingWords;
    const std::uint64_t window_bytes = legs_off_ + sizeof(std::uint64_t) * kZeroStagingLegWords;
    PURLIN_TRY(alloc_window(boot, window_bytes));
    PURLIN_TRY(hold(sizeof(LocalState) * channels_, &state_));
    scratch_bytes_ = (static_cast<std::uint64_t>(n) + 1) * policy_.latency_max_bytes + 256;
    PURLIN_TRY(hold(scratch_bytes_ * channels_, &scratch_));
    PURLIN_TRY(hold(sizeof(unsigned) * channels_, &done_));
    PURLIN_TRY(hold(sizeof(std::uint64_t) * kZeroStagingMaxCtas, &zs_calls_));
    PURLIN_TRY(hold(sizeof(std::uint64_t) * kZeroStagingLegCounters, &leg_calls_));
    if (!config().stamps_path.empty())
      PURLIN_TRY(hold(sizeof(std::uint64_t) * kZeroStagingStampCalls * kZeroStagingMaxCtas * kZeroStagingStamps, &zs_stamps_));
    void* flags_dev = nullptr;
    PURLIN_TRY(cuda::host_mapped_alloc(2 * sizeof(int), &flags_host_, &flags_dev));
    abort_host_ = static_cast<volatile int*>(flags_host_);
    error_host_ = static_cast<volatile int*>(flags_host_) + 1;

    struct Export {
      std::int32_t pid;
      std::int32_t device;
      std::uint64_t ptr;
      std::uint64_t bytes;     // of the cuMem allocation
      cuda::IpcHandle handle;  // legacy CUDA IPC
      FdAddress mailbox;       // cuMem: where to send the descriptor of ours
    } mine{getpid(), device_, reinterpret_cast<std::uint64_t>(window_), own_vmm_.bytes, {}, {}};
    if (mailbox_) mine.mailbox = mailbox_->address();
    else PURLIN_TRY(cuda::ipc_export(window_, &mine.handle));
    std::vector<Export> all(static_cast<std::size_t>(n));
    PURLIN_TRY(boot.all_gather(&mine, sizeof(Export), all.data()));
    std::vector<char*> bases(static_cast<std::size_t>(n));
    std::vector<int> others;
    for (int r = 0; r < n; ++r) {
      if (all[r].pid == mine.pid) {
        // Same process: the pointer is valid here, once this device may reach the peer's.
        PURLIN_TRY(cuda::enable_peer_access(device_, all[r].device));
        bases[r] = reinterpret_cast<char*>(all[r].ptr);
        continue;
      }
      others.push_back(r);
      if (mailbox_) continue;
      void* p = nullptr;
      PURLIN_TRY(cuda::ipc_import(all[r].handle, &p));
      imported_.push_back(p);
      bases[r] = static_cast<char*>(p);
    }
    if (mailbox_) {
      // Every rank of another process gets a descriptor of our window and sends one of its own.
      std::vector<FdAddress> boxes(static_cast<std::size_t>(n));
      for (int r = 0; r < n; ++r) boxes[r] = all[r].mailbox;
      int fd = -1;
      PURLIN_TRY(cuda::vmm_export_fd(own_vmm_, &fd));
      std::vector<ReceivedFd> got;
      Status s = mailbox_->exchange(me, fd, others, others, boxes, config().bootstrap_timeout_s,
                                    [&boot] { return boot.stopped(); }, &got);
      ::close(fd);
      if (s != Status::ok) {
        log::warn("PURLIN_CUMEM=0 shares the GPU windows by CUDA IPC instead of descriptors");
        s = adopt_error(s, last_error() + "; PURLIN_CUMEM=0 shares GPU memory by CUDA IPC instead");
      }
      for (const ReceivedFd& g : got) {
        cuda::VmmMapping m;
        if (s == Status::ok) s = cuda::vmm_import_fd(g.fd, all[g.from].bytes, device_, &m);
        ::close(g.fd);
        if (m.ptr) {
          imported_vmm_.push_back(m);
          imported_from_.push_back(g.from);
          bases[g.from] = static_cast<char*>(m.ptr);
        }
      }
      PURLIN_TRY(s);
      mailbox_.reset();
      other_processes_ = others;
    }
    zs_words_.resize(static_cast<std::size_t>(n));
    leg_words_.resize(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      zs_words_[r] = reinterpret_cast<std::uint64_t*>(bases[r] + zs_off_);
      leg_words_[r] = reinterpret_cast<std::uint64_t*>(bases[r] + legs_off_);
    }
    std::vector<Window> windows(static_cast<std::size_t>(n) * channels_);
    for (int c = 0; c < channels_; ++c)
      for (int r = 0; r < n; ++r) windows[c * n + r] = Window::at(bases[r] + c * geo_.total, geo_);
    PURLIN_TRY(hold(sizeof(Window) * windows.size(), &windows_dev_));
    PURLIN_TRY(cuda::check(cudaMemcpy(windows_dev_, windows.data(), sizeof(Window) * windows.size(), cudaMemcpyHostToDevice),
                           "cudaMemcpy(windows)"));
    if (exchange_bytes_) {
      std::vector<atom::LLPacket*> inbox(static_cast<std::size_t>(n));
      for (int r = 0; r < n; ++r) inbox[r] = reinterpret_cast<atom::LLPacket*>(bases[r] + exchange_off_);
      PURLIN_TRY(hold(sizeof(atom::LLPacket*) * n, &inbox_dev_));
      PURLIN_TRY(cuda::check(cudaMemcpy(inbox_dev_, inbox.data(), sizeof(atom::LLPacket*) * n, cudaMemcpyHostToDevice),
                             "cudaMemcpy(exchange boxes)"));
      PURLIN_TRY(hold(sizeof(std::uint64_t) * kExchangeMaxChannels, &exchange_epoch_));
      if (pair_bytes_) {
        std::vector<atom::LLPacket*> pbox(static_cast<std::size_t>(n));
        std::vector<std::uint64_t*> acks(static_cast<std::size_t>(n));
        for (int r = 0; r < n; ++r) {
          pbox[r] = reinterpret_cast<atom::LLPacket*>(bases[r] + pair_off_);
          acks[r] = reinterpret_cast<std::uint64_t*>(bases[r] + acks_off_);
        }
        PURLIN_TRY(hold(sizeof(atom::LLPacket*) * n, &pbox_dev_));
        PURLIN_TRY(hold(sizeof(std::uint64_t*) * n, &acks_dev_));
        PURLIN_TRY(cuda::check(cudaMemcpy(pbox_dev_, pbox.data(), sizeof(atom::LLPacket*) * n, cudaMemcpyHostToDevice),
                               "cudaMemcpy(pair boxes)"));
        PURLIN_TRY(cuda::check(cudaMemcpy(acks_dev_, acks.data(), sizeof(std::uint64_t*) * n, cudaMemcpyHostToDevice),
                               "cudaMemcpy(pair acks)"));
        const std::size_t counts = sizeof(std::uint64_t) * static_cast<std::size_t>(n) * kExchangeMaxChannels;
        PURLIN_TRY(hold(counts, &pair_sent_));
        PURLIN_TRY(hold(counts, &pair_taken_));
      }
      if (!config().stamps_path.empty())
        PURLIN_TRY(hold(sizeof(std::uint64_t) * kExchangeStamps * kExchangeStampCalls, &stamps_));
    }
    // cudaMemset of the allocations above runs on the legacy stream: finish it before any kernel.
    PURLIN_TRY(cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
    PURLIN_TRY(boot.barrier());  // every peer has mapped every window

    peers_ = std::make_unique<PeerBuffers>(&boot, device_, config().bootstrap_timeout_s);
    if (policy_.zero_staging_eager && n > 1) PURLIN_TRY(peers_->start_eager());
    fault_words_.resize(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) fault_words_[r] = Window::at(bases[r], geo_).fault;
    if (policy_.zero_staging_min_bytes && n > 1) PURLIN_TRY(PairBoard::create(boot, device_, config().bootstrap_timeout_s, &board_));
    args_.ctx.rank = me;
    args_.ctx.nranks = n;
    args_.ctx.geo = geo_;
    args_.ctx.win = windows_dev_;
    args_.ctx.state = state_;
    args_.ctx.scratch = scratch_;
    args_.ctx.latency_max = policy_.latency_max_bytes;
    args_.ctx.chunk_cap = policy_.chunk_bytes;
    args_.ctx.slots = policy_.slots;
    args_.channels = channels_;
    args_.channel_bytes = policy_.channel_bytes;
    args_.scratch_bytes = scratch_bytes_;
    args_.guard = atom::SmGuard{static_cast<const volatile int*>(flags_dev), static_cast<volatile int*>(flags_dev) + 1,
                                static_cast<std::uint64_t>(args.timeout_s * 1e9),
                                reinterpret_cast<const volatile std::uint64_t*>(static_cast<char*>(window_) + geo_.fault_off)};
    args_.done = done_;
    args_.one_gpu = args.one_gpu;
    xargs_.rank = me;
    xargs_.nranks = n;
    xargs_.box_packets = box_packets_;
    xargs_.inbox = inbox_dev_;
    xargs_.epoch = exchange_epoch_;
    xargs_.win = windows_dev_;
    xargs_.guard = args_.guard;
    xargs_.guard.poll_ns = policy_.exchange_poll_ns;
    xargs_.stamps = stamps_;
    // Programmatic dependent launch (Hopper and newer): the next kernel launches while this one
    // finishes, and waits on the GPU for it to complete. Only where the kernels were compiled for
    // compute_90 or newer: code for older architectures (JIT-compiled on a newer GPU) holds no
    // griddepcontrol.wait, so a kernel that launched early would not wait.
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_);
    args_.pdl = major >= 9 && kernels_ptx_version(device_) >= 90 && !config().pdl_disabled;
    xargs_.pdl = args_.pdl;
    xargs_.trigger = config().pdl_trigger;
    log::info(log::kInit,
              "SM datapath: rank {}/{} on device {}, {} channels x {} B windows shared by {}, policy {}, flags at {} "
              "scope{}",
              me, n, device_, channels_, geo_.total,
              own_vmm_.ptr ? "cuMem descriptors" : imported_.empty() ? "pointers" : "CUDA IPC", policy_.name,
              args_.one_gpu ? "GPU" : "system", args_.pdl ? ", programmatic dependent launch" : "");
    return Status::ok;
  }

  Status execute(const Op& op, void* stream_ptr) override {
    PURLIN_TRY(refusal());
    auto stream = static_cast<cudaStream_t>(stream_ptr);
    // Collectives (not Send/Recv rounds) are counted alike on every rank, so that a rank at the
    // in-place agreement learns when a peer ran the same call another way.
    const std::uint64_t call = op.kind == CollKind::send_recv ? 0 : ++collectives_;
    // A call the exchange ran before, with the same arguments and buffers: straight to its launch.
    if (const ExchangeMemo* m = recall(op)) {
      peers_->ran(call);
      return run_exchange(op.kind, m->x, m->threads, stream);
    }
    bool zero_staged = false;
    const Status zs = zero_staging(op, stream, call, &zero_staged);
    peers_->ran(call);
    // A mismatch, or a failure after the ranks agreed to run the call in place (their kernels then
    // wait for this rank's): end the peers' waits.
    if (zs == Status::invalid_usage) raise_fault_from_host(zs);
    else if (failed(zs) && zero_staged) raise_fault_from_host(Status::remote_error);
    PURLIN_TRY(zs);
    if (zero_staged) return Status::ok;
    last_zero_staging_.store(false, std::memory_order_relaxed);
    ExchangeArgs x;
    int threads = 0;
    if (exchange_plan(op, &x, &threads)) {
      remember(op, x, threads);
      return run_exchange(op.kind, x, threads, stream);
    }
    Op rest, unmoved;
    const Op* generic = &op;
    bool legs_aside = false;
    if (op.kind == CollKind::send_recv && board_) {
      bool any = false, settled = false;
      const Status legs = zero_staging_legs(op, stream, &unmoved, &any, &legs_aside, &settled);
      // A peer whose leg with this rank was agreed waits for it on the GPU: end its wait.
      if (failed(legs) && settled) raise_fault_from_host(Status::remote_error);
      PURLIN_TRY(legs);
      if (any) {
        if (!carries_bytes(unmoved)) return Status::ok;
        generic = &unmoved;
      }
    }
    if (op.kind == CollKind::send_recv && pair_bytes_) {
      bool any = false;
      PURLIN_TRY(pair_round(*generic, stream, &rest, &any));
      if (any) {
        if (!carries_bytes(rest)) return join_legs(legs_aside, stream);
        generic = &rest;
      }
    }
    PURLIN_TRY(execute_generic(*generic, stream));
    return join_legs(legs_aside, stream);
  }

  static bool carries_bytes(const Op& op) {
    for (const Part& p : op.in)
      if (p.bytes) return true;
    for (const Part& p : op.out)
      if (p.bytes) return true;
    return false;
  }

  // Runs in place the messages of Send/Recv round `op` that are within zero-staging's bound and
  // whose ends agree to (PairBoard), captured into a graph or (with zero_staging_eager) not, and
  // leaves the others in *rest (*any: some message was zero-staged). Where the round stages some
  // messages too, the legs' kernel runs beside it on a stream of ours (*aside; join_legs joins it
  // after the staged launches), as NCCL runs a round's messages together: a leg may wait for a
  // peer whose matching message comes after a staged one on the peer's stream.
  // *settled: some peer agreed a leg with this rank (it then waits for this rank's part on the GPU).
  Status zero_staging_legs(const Op& op, cudaStream_t stream, Op* rest, bool* any, bool* aside, bool* settled) {
    *any = false;
    *aside = false;
    *settled = false;
    const int n = xargs_.nranks, me = xargs_.rank;
    // Only messages the staged path could not buffer: a send whose receive is posted later must still
    // finish as NCCL's do (NCCL buffers some 8 MiB per pair), and an end in place depends on its
    // peer's stream reaching the message, whether it waits or moves.
    if (!policy_.zero_staging_min_bytes) return Status::ok;
    const std::uint64_t least = std::max(policy_.zero_staging_min_bytes, 2 * policy_.staging_half + 1);
    if (op.ragged || static_cast<int>(op.in.size()) != n || static_cast<int>(op.out.size()) != n) return Status::ok;
    bool some = false;
    for (int p = 0; p < n; ++p)
      some = some || (p != me && (op.in[p].bytes >= least || op.out[p].bytes >= least));
    if (!some) return Status::ok;
    cudaGraph_t graph = nullptr;
    if (!zero_staging_allowed(stream, &graph)) return Status::ok;
    const bool captured = graph != nullptr;
    ZeroStagingLegArgs a;
    a.rank = me;
    a.nranks = n;
    a.shares = std::clamp(policy_.zero_staging_ctas, 1, kZeroStagingMaxCtas);
    a.guard = args_.guard;
    a.one_gpu = args_.one_gpu;
    a.counters = leg_calls_;
    a.win = windows_dev_;
    for (int r = 0; r < n; ++r) a.words[r] = leg_words_[r];
    *rest = op;
    int moved = 0;
    bool agreed = true;  // every moved message's ends gave the same size
    std::uint64_t largest = 0, least_moved = ~std::uint64_t{0};
    // Receives first: a rank that offers its outputs before its inputs is more often the end that
    // waits on its receives and moves its sends, so that the ranks' copies spread evenly.
    for (int side : {1, 0}) {
      for (int k = 1; k < n; ++k) {
        const int p = (me + k) % n;
        Part& part = side == 0 ? rest->in[p] : rest->out[p];
        if (part.bytes < least) continue;
        PairBoard::Role role = PairBoard::Role::staged;
        char* theirs = nullptr;
        std::uint64_t their_bytes = 0;
        PURLIN_TRY(board_->meet(p, side, part.ptr, part.bytes, graph, &role, &theirs, &their_bytes));
        if (role == PairBoard::Role::staged) continue;
        *settled = true;
        ZeroStagingLeg& l = a.legs[a.count++];
        l.peer = static_cast<std::uint8_t>(p);
        l.side = static_cast<std::uint8_t>(side);
        // Never more than either end gave (the tags tell ends that disagree apart, and stop them).
        l.bytes = std::min(part.bytes, their_bytes);
        l.tag = static_cast<std::uint16_t>((part.bytes * 0x9e3779b97f4a7c15ull) >> 48);
        l.role = role == PairBoard::Role::move ? LegRole::move : LegRole::wait;
        l.dst = side == 0 ? theirs : part.ptr;
        l.src = side == 0 ? part.ptr : theirs;
        if (role == PairBoard::Role::move) {
          ++moved;
          least_moved = std::min(least_moved, part.bytes);
          agreed = agreed && their_bytes == part.bytes;
        }
        largest = std::max(largest, part.bytes);
        part = Part{nullptr, 0};
      }
    }
    if (!a.count) return Status::ok;
    *any = true;
    *aside = carries_bytes(*rest);
    last_stream_used_ = true;
    last_local_.store(false, std::memory_order_relaxed);
    last_exchange_.store(false, std::memory_order_relaxed);
    last_zero_staging_.store(true, std::memory_order_relaxed);
    // The moved messages go to the copy engines where each is within the policy's bound; the end that
    // waits cannot tell. Not where two ends gave different sizes: the engines' copies are queued
    // whatever the arrival finds, where the SM form stops at the tags' mismatch before moving a byte.
    const bool ce = moved && agreed && policy_.ce_send_recv_min_bytes && least_moved >= policy_.ce_send_recv_min_bytes;
    last_ce_.store(ce, std::memory_order_relaxed);
    last_kind_.store(op.kind, std::memory_order_relaxed);
    last_channels_.store(moved && !ce ? a.shares : 1, std::memory_order_relaxed);
    log::info(log::kColl, "zero-staging: rank {} SendRecv of {} messages (largest {} B) {} in place on {}, moving {}{}",
              me, a.count, largest, captured ? "captured" : "eager",
              ce ? std::string("the copy engines") : fmt::format("{} CTAs", moved ? a.shares : 1), moved,
              *aside ? ", beside the round's other messages" : "");
    cudaStream_t on = stream;
    if (*aside) {
      if (!side_) {
        PURLIN_TRY(cuda::check(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
        PURLIN_TRY(cuda::check(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
        PURLIN_TRY(cuda::check(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
      }
      PURLIN_TRY(cuda::check(cudaEventRecord(fork_, stream), "cudaEventRecord"));
      PURLIN_TRY(cuda::check(cudaStreamWaitEvent(side_, fork_, 0), "cudaStreamWaitEvent"));
      on = side_;
    }
    if (ce) PURLIN_TRY(run_ce_legs(a, on));
    else PURLIN_TRY(cuda::check(launch_zero_staging_legs(a, on), "launching the zero-staging legs kernel"));
    return captured ? Status::ok : board_->launched(on);
  }

  // The caller's stream waits for the legs' kernel launched aside (zero_staging_legs).
  Status join_legs(bool aside, cudaStream_t stream) {
    if (!aside) return Status::ok;
    PURLIN_TRY(cuda::check(cudaEventRecord(join_, side_), "cudaEventRecord"));
    return cuda::check(cudaStreamWaitEvent(stream, join_, 0), "cudaStreamWaitEvent");
  }

  Status run_exchange(CollKind kind, const ExchangeArgs& x, int threads, cudaStream_t stream) {
    last_stream_used_ = true;
    last_local_.store(false, std::memory_order_relaxed);
    last_zero_staging_.store(false, std::memory_order_relaxed);
    last_exchange_.store(true, std::memory_order_relaxed);
    last_kind_.store(kind, std::memory_order_relaxed);
    last_channels_.store(x.channels, std::memory_order_relaxed);
    last_slots_.store(x.slots, std::memory_order_relaxed);
    last_word_.store(x.word, std::memory_order_relaxed);
    return cuda::check(launch_exchange(kind, x, threads, stream), "launching the exchange kernel");
  }

  // The exchange's plans of the last kExchangeMemos distinct calls, by everything that decides them:
  // collective, type, reduction, root and every part of both sides. Only calls too small for
  // zero-staging are kept, so a call found here takes the exchange whether captured or not.
  struct ExchangeMemo {
    CollKind kind = CollKind::all_reduce;
    DataType type = DataType::uint8;
    ReduceOp op{};
    int root = -1;
    std::vector<Part> in, out;
    ExchangeArgs x{};
    int threads = 0;
  };
  static constexpr std::size_t kExchangeMemos = 4;
  static bool same_parts(const std::vector<Part>& a, const std::vector<Part>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i].ptr != b[i].ptr || a[i].bytes != b[i].bytes) return false;
    return true;
  }
  const ExchangeMemo* recall(const Op& op) const {
    for (std::size_t i = 0; i < memos_used_; ++i) {
      const ExchangeMemo& m = memos_[i];
      if (m.kind == op.kind && m.type == op.type && m.op.kind == op.op.kind && m.op.scalar_bits == op.op.scalar_bits &&
          m.op.scalar_ptr == op.op.scalar_ptr && m.op.nranks == op.op.nranks && m.root == op.root &&
          !op.copy_input && same_parts(m.in, op.in) && same_parts(m.out, op.out))
        return &m;
    }
    return nullptr;
  }
  // A call's larger side, alike on every rank (a Scatter's input names no size away from the root).
  std::uint64_t larger_side(const Op& op) const {
    std::uint64_t in_total = 0, out_total = 0;
    for (const Part& p : op.in) in_total += p.bytes;
    for (const Part& p : op.out) out_total += p.bytes;
    if (op.kind == CollKind::scatter) in_total = out_total * static_cast<std::uint64_t>(xargs_.nranks);
    return std::max(in_total, out_total);
  }
  // The size from which a call of `kind` may be zero-staged (Broadcast and Reduce have their own, and
  // so has AllReduce).
  std::uint64_t zero_staging_floor(CollKind kind) const {
    switch (kind) {
      case CollKind::broadcast:
      case CollKind::broadcast_direct:
      case CollKind::reduce:
      case CollKind::reduce_direct: return policy_.zero_staging_rooted_min_bytes;
      case CollKind::all_reduce:
      case CollKind::all_reduce_direct: return policy_.zero_staging_all_reduce_min_bytes;
      default: return policy_.zero_staging_min_bytes;
    }
  }
  void remember(const Op& op, const ExchangeArgs& x, int threads) {
    const std::uint64_t floor = zero_staging_floor(op.kind);
    if (op.copy_input || (floor && larger_side(op) >= floor)) return;
    ExchangeMemo& m = memos_[memos_next_];
    memos_next_ = (memos_next_ + 1) % kExchangeMemos;
    memos_used_ = std::min(memos_used_ + 1, kExchangeMemos);
    m.kind = op.kind;
    m.type = op.type;
    m.op = op.op;
    m.root = op.root;
    m.in.assign(op.in.begin(), op.in.end());
    m.out.assign(op.out.begin(), op.out.end());
    m.x = x;
    m.threads = threads;
  }

  // The generic kernels (sm_kernel.cu): every collective, any size.
  Status execute_generic(const Op& op, cudaStream_t stream) {
    last_exchange_.store(false, std::memory_order_relaxed);
    KernelArgs a = args_;
    a.channels = channels_for(op);
    a.least_part_channels = least_part_channels(op);
    a.root = op.root;
    a.type = op.type;
    a.op = op.op;
    a.mid_bytes = op.mid_bytes;
    a.nin = static_cast<int>(op.in.size());
    a.nout = static_cast<int>(op.out.size());
    for (int i = 0; i < a.nin; ++i) a.in[i] = op.in[i];
    for (int i = 0; i < a.nout; ++i) a.out[i] = op.out[i];
    if (op.copy_input) {
      PURLIN_TRY(ensure_copy(op.input_bytes));
      PURLIN_TRY(cuda::check(cudaMemcpyAsync(copy_, op.in.front().ptr, op.input_bytes, cudaMemcpyDefault, stream),
                             "cudaMemcpyAsync(private input)"));
      for (int i = 0; i < a.nin; ++i) a.in[i].ptr = copy_ + (op.in[i].ptr - op.in.front().ptr);
    }
    last_stream_used_ = true;
    last_local_.store(false, std::memory_order_relaxed);
    last_kind_.store(op.kind, std::memory_order_relaxed);
    last_channels_.store(a.channels, std::memory_order_relaxed);
    return cuda::check(launch_snac(op.kind, a, stream), "launching the SNAC kernel");
  }

  Status copy_local(char* dst, const char* src, std::uint64_t bytes, void* stream) override {
    PURLIN_TRY(refusal());
    last_local_.store(true, std::memory_order_relaxed);
    if (dst == src || bytes == 0) return Status::ok;
    last_stream_used_ = true;
    // Default: the buffers may be any memory the device addresses (pinned host memory too).
    return cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)),
                       "cudaMemcpyAsync(one rank)");
  }

  void abort() override {
    if (abort_host_) *abort_host_ = 1;
  }
  const char* datapath() const override { return "sm"; }
  std::uint64_t device_bytes() const override { return held_.load(std::memory_order_relaxed); }
  // The window is what can be suspended, where it is shared by cuMem descriptors: each rank then
  // holds its own mappings of its peers' windows and can give them back and map them again at the
  // same addresses. A window shared by pointers within one process or by legacy CUDA IPC stays, as
  // does the rest (small, and kept by captured graphs as it is).
  std::uint64_t suspendable_bytes() const override { return own_vmm_.ptr ? own_vmm_.bytes : 0; }

  // The peers' user buffers the zero-staged collectives and Send/Recv messages map (each a
  // collective step; the board exists alike on every rank).
  Status resume_peer_buffers() {
    PURLIN_TRY(peers_->resume());
    return board_ ? board_->resume() : Status::ok;
  }

  Status suspend_memory(Bootstrap& boot) override {
    const CurrentDevice keep;
    PURLIN_TRY(cuda::set_device(device_));
    // Every rank's work is complete (a peer's kernel may still write into this window until then)
    // before the window's contents are kept: flags and epochs, and the messages of sends that
    // completed before their receives were posted, which come back at resume. At each step the
    // ranks agree that each got this far.
    PURLIN_TRY(agree(boot, cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize")));
    Status local = Status::ok;
    if (suspendable_bytes()) {  // alike on every rank: the ranks chose together
      suspended_window_ = std::make_unique_for_overwrite<char[]>(own_vmm_.bytes);
      local = cuda::check(cudaMemcpy(suspended_window_.get(), own_vmm_.ptr, own_vmm_.bytes, cudaMemcpyDeviceToHost),
                          "cudaMemcpy(window to host)");
    }
    PURLIN_TRY(agree(boot, local));
    peers_->suspend();
    if (board_) board_->suspend();
    if (suspendable_bytes() == 0) return Status::ok;
    for (cuda::VmmMapping& m : imported_vmm_) cuda::vmm_unmap(&m);
    cuda::vmm_unmap(&own_vmm_);
    log::info(log::kInit, "SM datapath: rank {} suspended its window ({} B, kept in host memory) and its mappings of {} peers' windows",
              boot.rank(), own_vmm_.bytes, imported_vmm_.size());
    return boot.barrier();  // no rank maps this window any more: its memory is free
  }

  Status resume_memory(Bootstrap& boot) override {
    const CurrentDevice keep;
    PURLIN_TRY(cuda::set_device(device_));
    if (suspendable_bytes() == 0) {
      PURLIN_TRY(resume_peer_buffers());
      return boot.barrier();
    }
    // New memory with the window's contents, and a descriptor of it; the ranks agree that each got
    // this far before they exchange descriptors. A copy from pageable memory may return before it
    // lands: no kernel, ours or a peer's, may see the window before it has.
    Status local = suspended_window_ ? cuda::vmm_remap(device_, &own_vmm_)
                                     : fail(Status::internal_error, "SM datapath: resumed without being suspended");
    if (local == Status::ok)
      local = cuda::check(cudaMemcpy(own_vmm_.ptr, suspended_window_.get(), own_vmm_.bytes, cudaMemcpyHostToDevice),
                          "cudaMemcpy(window from host)");
    if (local == Status::ok) local = cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    int fd = -1;
    if (local == Status::ok) local = cuda::vmm_export_fd(own_vmm_, &fd);
    if (Status agreed = agree(boot, local); agreed != Status::ok) {
      if (fd >= 0) ::close(fd);
      return agreed;
    }
    suspended_window_.reset();
    // Every rank of another process gets a descriptor of the new memory and maps it where it mapped
    // the old one, so the windows' addresses (kernel arguments, captured graphs) stay valid.
    struct Box {
      FdAddress address;
      std::int32_t open;
    } mine{};
    std::unique_ptr<FdMailbox> mailbox;
    const Status opened = FdMailbox::open(&mailbox);
    if (opened == Status::ok) mine = Box{mailbox->address(), 1};
    const int n = boot.nranks();
    std::vector<Box> all(static_cast<std::size_t>(n));
    Status s = boot.all_gather(&mine, sizeof(Box), all.data());
    for (const Box& b : all)
      if (s == Status::ok && !b.open)
        s = opened != Status::ok ? opened : fail(Status::system_error, "SM datapath: a peer could not open its mailbox to resume");
    if (s != Status::ok) {
      ::close(fd);
      return s;
    }
    std::vector<FdAddress> boxes(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) boxes[r] = all[r].address;
    std::vector<ReceivedFd> got;
    s = mailbox->exchange(boot.rank(), fd, other_processes_, other_processes_, boxes, config().bootstrap_timeout_s,
                          [&boot] { return boot.stopped(); }, &got);
    ::close(fd);
    for (const ReceivedFd& g : got) {
      const auto at = std::find(imported_from_.begin(), imported_from_.end(), g.from);
      if (s == Status::ok && at == imported_from_.end())
        s = fail(Status::internal_error, fmt::format("SM datapath: a window from rank {}, which this rank never mapped", g.from));
      if (s == Status::ok) s = cuda::vmm_import_fd_at(g.fd, device_, &imported_vmm_[at - imported_from_.begin()]);
      ::close(g.fd);
    }
    PURLIN_TRY(s);
    log::info(log::kInit, "SM datapath: rank {} resumed its window and its mappings of {} peers' windows", boot.rank(),
              imported_vmm_.size());
    PURLIN_TRY(resume_peer_buffers());
    return boot.barrier();  // every rank maps every window again
  }
  std::string last_plan() const override {
    if (last_local_.load(std::memory_order_relaxed)) return "OneRank_copy";
    if (last_zero_staging_.load(std::memory_order_relaxed))
      return last_ce_.load(std::memory_order_relaxed)
                 ? fmt::format("{}_ZeroStagingxCE", name_of(last_kind_.load(std::memory_order_relaxed)))
                 : fmt::format("{}_ZeroStagingx{}cta", name_of(last_kind_.load(std::memory_order_relaxed)),
                               last_channels_.load(std::memory_order_relaxed));
    if (last_exchange_.load(std::memory_order_relaxed))
      return fmt::format("{}_LLxExchange{}x{}ch", name_of(last_kind_.load(std::memory_order_relaxed)),
                         last_word_.load(std::memory_order_relaxed)    ? "Word"
                         : last_slots_.load(std::memory_order_relaxed) ? "Lean"
                                                                       : "",
                         last_channels_.load(std::memory_order_relaxed));
    return fmt::format("{}_SMx{}ch", name_of(last_kind_.load(std::memory_order_relaxed)),
                       last_channels_.load(std::memory_order_relaxed));
  }
  Status async_status() const override {
    if (error_host_ && *error_host_) return static_cast<Status>(*error_host_);
    return Status::ok;
  }

 private:
  // PURLIN_STAMPS=PREFIX: the exchange's stamps of channel 0, one line per call (its epoch, then
  // globaltimer nanoseconds: entry, start of work, the end of every Atom step, the end; 0 where a
  // call had fewer steps), into PREFIX.RANK; zero-staging's, one line per call and CTA (the call's
  // slot in the ring, the CTA, then kZeroStagingStamps globaltimer nanoseconds), into PREFIX.zs.RANK.
  void write_stamps() const {
    if (stamps_)
      write_stamp_rows(stamps_, kExchangeStampCalls, kExchangeStamps, "", [](std::FILE* f, std::size_t e) {
        std::fprintf(f, "%zu", e);
      });
    if (zs_stamps_)
      write_stamp_rows(zs_stamps_, std::size_t{kZeroStagingStampCalls} * kZeroStagingMaxCtas, kZeroStagingStamps, ".zs",
                       [](std::FILE* f, std::size_t k) {
                         std::fprintf(f, "%zu %zu", k / kZeroStagingMaxCtas, k % kZeroStagingMaxCtas);
                       });
  }

  // Copies a device ring of `rows` rows of `width` stamps into PREFIX<suffix>.RANK, one line per row
  // that was stamped: what `label` prints of the row's index, then its stamps.
  template <class Label>
  void write_stamp_rows(const std::uint64_t* ring, std::size_t rows, std::size_t width, const char* suffix,
                        Label&& label) const {
    std::vector<std::uint64_t> t(rows * width);
    if (cudaMemcpy(t.data(), ring, sizeof(std::uint64_t) * t.size(), cudaMemcpyDeviceToHost) != cudaSuccess) return;
    const std::string path = fmt::format("{}{}.{}", config().stamps_path, suffix, xargs_.rank);
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) return;
    for (std::size_t k = 0; k < rows; ++k) {
      const std::uint64_t* row = &t[k * width];
      if (!row[0]) continue;
      label(f, k);
      for (std::size_t i = 0; i < width; ++i) std::fprintf(f, " %llu", static_cast<unsigned long long>(row[i]));
      std::fprintf(f, "\n");
    }
    std::fclose(f);
  }

  // A failure found on the host that peers' kernels would otherwise wait out (a mismatch at the
  // in-place agreement, or a Send/Recv leg agreed with a peer that this rank then could not launch):
  // every peer's fault word gets it, as raise_fault stores one a kernel found, so that the peers'
  // kernels waiting for this rank end too. Copies on a stream of their own, waited for here: nothing
  // of the user's runs before them.
  void raise_fault_from_host(Status why) {
    const std::uint64_t fault = static_cast<std::uint64_t>(why);
    cudaStream_t s = nullptr;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    for (int r = 0; r < xargs_.nranks; ++r)
      if (r != xargs_.rank) cudaMemcpyAsync(fault_words_[r], &fault, sizeof fault, cudaMemcpyHostToDevice, s);
    if (cudaStreamSynchronize(s) != cudaSuccess) cudaGetLastError();
    cudaStreamDestroy(s);
  }

  // Why no call may run any more: an abort, or an earlier call that failed on the GPU.
  Status refusal() const {
    if (*abort_host_) return fail(Status::remote_error, "the communicator was aborted");
    if (*error_host_) return fail(Status::remote_error, "a previous operation of this communicator failed on the GPU");
    return Status::ok;
  }

  // Whether a call on `stream` may be zero-staged: captured into a graph (*graph, else null), or
  // outside one where the policy allows it (zero_staging_eager).
  bool zero_staging_allowed(cudaStream_t stream, cudaGraph_t* graph) const {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    *graph = nullptr;
    if (cudaStreamGetCaptureInfo(stream, &capture, nullptr, graph, nullptr, nullptr, nullptr) != cudaSuccess) {
      cudaGetLastError();
      *graph = nullptr;
      return false;
    }
    if (capture == cudaStreamCaptureStatusActive) return true;
    *graph = nullptr;
    return capture == cudaStreamCaptureStatusNone && policy_.zero_staging_eager;
  }

  // Runs `op` in place (snac/protocol/zero_staging.h) when it is within the policy's bounds and
  // every rank's buffers can be mapped here (*ran then says so): captured into a graph, or outside
  // one where the policy allows (zero_staging_eager). Every rank computes the same answer: the
  // checks before PeerBuffers::share and share_eager use only what all ranks' calls share
  // (collective, sizes, capture, policy), and those decide on what every rank offered.
  Status zero_staging(const Op& op, cudaStream_t stream, std::uint64_t call, bool* ran) {
    *ran = false;
    if (!policy_.zero_staging_min_bytes || op.ragged || op.in.empty() || op.out.empty()) return Status::ok;
    ZeroStagingKind kind;
    switch (op.kind) {
      case CollKind::all_reduce:
      case CollKind::all_reduce_direct: kind = ZeroStagingKind::all_reduce; break;
      case CollKind::all_gather: kind = ZeroStagingKind::all_gather; break;
      case CollKind::reduce_scatter: kind = ZeroStagingKind::reduce_scatter; break;
      case CollKind::all_to_all: kind = ZeroStagingKind::all_to_all; break;
      case CollKind::broadcast:
      case CollKind::broadcast_direct: kind = ZeroStagingKind::broadcast; break;
      case CollKind::reduce:
      case CollKind::reduce_direct: kind = ZeroStagingKind::reduce; break;
      case CollKind::gather: kind = ZeroStagingKind::gather; break;
      case CollKind::scatter: kind = ZeroStagingKind::scatter; break;
      default: return Status::ok;
    }
    const bool reduces = !zero_staging_copies_only(kind);
    // PreMulSum scales each contribution by its own rank's scalar, which the peers do not hold.
    if (reduces && scales(op.op)) return Status::ok;
    // Both sides contiguous from their first part (the shim's uniform calls always are).
    const auto extent = [](const std::vector<Part>& parts, std::uint64_t* total) {
      *total = 0;
      for (const Part& p : parts) {
        if (p.bytes && p.ptr != parts.front().ptr + *total) return false;
        *total += p.bytes;
      }
      return true;
    };
    const int n = xargs_.nranks, me = xargs_.rank;
    const std::uint64_t nn = static_cast<std::uint64_t>(n);
    // A side the collective does not use on this rank (away from the root) is not checked, not
    // offered and not mapped.
    const bool root = me == op.root;
    const bool in_used = !(kind == ZeroStagingKind::broadcast || kind == ZeroStagingKind::scatter) || root;
    const bool out_used = !(kind == ZeroStagingKind::reduce || kind == ZeroStagingKind::gather) || root;
    std::uint64_t in_total = 0, out_total = 0;
    if ((in_used && !extent(op.in, &in_total)) || (out_used && !extent(op.out, &out_total))) return Status::ok;
    // The block every rank's call names alike (a rank's message, or the whole buffer of AllReduce,
    // Broadcast and Reduce), from a side every rank uses, and the sizes the used sides must have.
    std::uint64_t block = 0, in_want = 0, out_want = 0;
    switch (kind) {
      case ZeroStagingKind::all_reduce: block = in_want = out_want = in_total; break;
      case ZeroStagingKind::all_gather: block = in_want = in_total, out_want = block * nn; break;
      case ZeroStagingKind::reduce_scatter: block = out_want = out_total, in_want = block * nn; break;
      case ZeroStagingKind::all_to_all: block = in_total / nn, in_want = out_want = block * nn; break;
      case ZeroStagingKind::broadcast: block = in_want = out_want = out_total; break;
      case ZeroStagingKind::reduce: block = in_want = out_want = in_total; break;
      case ZeroStagingKind::gather: block = in_want = in_total, out_want = block * nn; break;
      case ZeroStagingKind::scatter: block = out_want = out_total, in_want = block * nn; break;
    }
    if ((in_used && in_total != in_want) || (out_used && out_total != out_want)) return Status::ok;
    // The call's larger side, alike on every rank.
    const std::uint64_t size = kind == ZeroStagingKind::broadcast || kind == ZeroStagingKind::reduce ||
                                       kind == ZeroStagingKind::all_reduce
                                   ? block
                                   : block * nn;
    if (size < zero_staging_floor(op.kind)) return Status::ok;
    cudaGraph_t graph = nullptr;
    if (!zero_staging_allowed(stream, &graph)) return Status::ok;
    const bool captured = graph != nullptr;

    ZeroStagingArgs a;
    a.kind = kind;
    a.rank = xargs_.rank;
    a.nranks = n;
    a.root = std::max(op.root, 0);
    const int ctas = size < policy_.zero_staging_min_bytes    ? policy_.zero_staging_below_ctas
                     : size < policy_.zero_staging_full_bytes ? policy_.zero_staging_small_ctas
                                                              : policy_.zero_staging_ctas;
    a.ctas = std::clamp(ctas, 1, kZeroStagingMaxCtas);
    a.bytes = block;
    a.elem = size_of(op.type);
    a.align_elems = coll::shard_align_elems(static_cast<std::uint32_t>(a.elem));
    a.type = op.type;
    a.op = op.op;
    const std::uint64_t key = ((static_cast<std::uint64_t>(kind) << 56 | static_cast<std::uint64_t>(op.type) << 48 |
                                (reduces ? static_cast<std::uint64_t>(op.op.kind) << 40 : 0) |
                                static_cast<std::uint64_t>(a.root) << 32) ^
                               (block * 0x9e3779b97f4a7c15ull)) * 0xbf58476d1ce4e5b9ull;
    a.tag = key >> 48;
    a.guard = args_.guard;
    a.one_gpu = args_.one_gpu;
    a.calls = zs_calls_;
    a.stamps = zs_stamps_;
    a.win = windows_dev_;
    for (int r = 0; r < n; ++r) a.words[r] = zs_words_[r];
    PeerBuffers::Mine mine;
    mine.key = key;
    if (in_used) {
      mine.in = op.in.front().ptr;
      mine.in_bytes = in_total;
    }
    if (out_used) {
      mine.out = op.out.front().ptr;
      mine.out_bytes = out_total;
    }
    // AlltoAll's input and output are one buffer (moved in pairs) or apart.
    mine.overlap_ok = kind != ZeroStagingKind::all_to_all;
    bool go = false;
    if (captured) PURLIN_TRY(peers_->share(mine, graph, &go, a.in, a.out));
    else PURLIN_TRY(peers_->share_eager(mine, call, &go, a.in, a.out));
    if (!go) return Status::ok;
    a.pairs = kind == ZeroStagingKind::all_to_all && zero_staging_in_pairs(a.in, a.out, n);
    last_stream_used_ = true;
    last_local_.store(false, std::memory_order_relaxed);
    last_exchange_.store(false, std::memory_order_relaxed);
    last_zero_staging_.store(true, std::memory_order_relaxed);
    last_kind_.store(op.kind, std::memory_order_relaxed);
    last_channels_.store(a.ctas, std::memory_order_relaxed);
    *ran = true;
    // Calls that only copy go to the copy engines from the policy's bound on.
    std::uint64_t ce_from = 0;
    switch (kind) {
      case ZeroStagingKind::all_gather: ce_from = policy_.ce_all_gather_min_bytes; break;
      case ZeroStagingKind::all_to_all: ce_from = policy_.ce_all_to_all_min_bytes; break;
      case ZeroStagingKind::broadcast: ce_from = policy_.ce_broadcast_min_bytes; break;
      case ZeroStagingKind::gather:
      case ZeroStagingKind::scatter: ce_from = policy_.ce_gather_scatter_min_bytes; break;
      default: break;
    }
    const bool ce = ce_from && size >= ce_from && !a.pairs;
    last_ce_.store(ce, std::memory_order_relaxed);
    log::info(log::kColl, "zero-staging: rank {} {} of {} B {} in place{}, {}", xargs_.rank, name_of(op.kind), size,
              captured ? "captured" : "eager", a.pairs ? " in pairs" : "",
              ce ? std::string("on the copy engines") : fmt::format("{} CTAs", a.ctas));
    if (ce) PURLIN_TRY(run_ce_copies(a, stream));
    else PURLIN_TRY(launch_zero_staging_captured(a, captured, stream));
    return captured ? Status::ok : peers_->launched(stream);
  }

  // Launches a whole zero-staging call. Captured behind this executor's previous one (the capture's
  // only dependency is that launch's node) it launches early with programmatic dependent launch:
  // that kernel lets it go only after its done barrier (ZeroStagingArgs::release), so its CTAs wait
  // on multiprocessors no peer's CTA still needs. Behind any other kernel, which could still be
  // waiting on peers' CTAs, it keeps plain stream order.
  Status launch_zero_staging_captured(ZeroStagingArgs& a, bool captured, cudaStream_t stream) {
    const bool early = args_.pdl && !config().zero_staging_pdl_disabled;
    const bool pdl = captured && early;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    const cudaGraphNode_t* deps = nullptr;
    std::size_t ndeps = 0;
    const auto last_node = [&]() -> cudaGraphNode_t {
      if (cudaStreamGetCaptureInfo(stream, &status, &id, nullptr, &deps, nullptr, &ndeps) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
      }
      return status == cudaStreamCaptureStatusActive && ndeps == 1 ? deps[0] : nullptr;
    };
    a.release = early;
    a.pdl = false;
    if (pdl) {
      const cudaGraphNode_t behind = last_node();
      a.pdl = behind && behind == zs_node_ && id == zs_capture_;
    }
    PURLIN_TRY(cuda::check(launch_zero_staging(a, stream), "launching the zero-staging kernel"));
    zs_node_ = pdl ? last_node() : nullptr;
    zs_capture_ = id;
    return Status::ok;
  }

  // Whether a Send/Recv message of `bytes` takes the pair exchange: every slice fits a box. Both ends
  // of a message decide alike from its size.
  bool pair_fits(std::uint64_t bytes) const {
    if (bytes == 0 || bytes > policy_.pair_max_bytes || !pair_bytes_) return false;
    const int chs = pair_channels(bytes, policy_.exchange_channel_bytes, policy_.exchange_channels);
    return exchange_slice(Part{nullptr, bytes}, 0, chs).bytes <= pair_box_packets_ * 8;
  }

  // Launches the pair exchange for the messages of Send/Recv round `op` that fit it (*any: there
  // were some) and leaves the others in *rest for the generic kernels, which run after it.
  Status pair_round(const Op& op, cudaStream_t stream, Op* rest, bool* any) {
    const int n = xargs_.nranks, me = xargs_.rank;
    *any = false;
    if (static_cast<int>(op.in.size()) != n || static_cast<int>(op.out.size()) != n) return Status::ok;
    PairArgs a;
    a.rank = me;
    a.nranks = n;
    a.box_packets = pair_box_packets_;
    a.pbox = pbox_dev_;
    a.acks = acks_dev_;
    a.sent = pair_sent_;
    a.taken = pair_taken_;
    a.win = windows_dev_;
    a.guard = xargs_.guard;
    a.pdl = xargs_.pdl;
    a.one_gpu = args_.one_gpu;
    *rest = op;
    std::uint64_t slice = 0, send_items = 0, recv_items = 0;
    int channels = 0;
    a.aligned = true;
    const auto take = [&](const Part& p, Part* into, Part* left, std::int32_t* chs, std::uint32_t* share, std::uint64_t* items) {
      if (!pair_fits(p.bytes)) return;
      *into = p;
      *left = Part{nullptr, 0};
      *chs = pair_channels(p.bytes, policy_.exchange_channel_bytes, policy_.exchange_channels);
      *share = static_cast<std::uint32_t>(exchange_slice(Part{nullptr, p.bytes}, 0, *chs).bytes);
      channels = std::max(channels, *chs);
      slice = std::max<std::uint64_t>(slice, *share);
      *items += atom::ll_packets(*share);
      a.aligned = a.aligned && reinterpret_cast<std::uintptr_t>(p.ptr) % 8 == 0 && p.bytes % 8 == 0;
      *any = true;
    };
    for (int d = 0; d < n; ++d) {
      // A message to itself is a copy: it takes the pair path when both ends of it do.
      if (d == me && !(pair_fits(op.in[d].bytes) && pair_fits(op.out[d].bytes))) continue;
      take(op.in[d], &a.in[d], &rest->in[d], &a.in_channels[d], &a.in_share[d], &send_items);
      take(op.out[d], &a.out[d], &rest->out[d], &a.out_channels[d], &a.out_share[d], &recv_items);
    }
    if (!*any) return Status::ok;
    a.channels = channels;
    const int threads = static_cast<int>(std::clamp<std::uint64_t>((atom::ll_packets(slice) + 31) / 32 * 32, 32, kExchangeMaxThreads));
    // A thread with more than one word of a channel to push or take keeps several in flight (the
    // flat form; PURLIN_PAIR_FLAT=0 turns it off): one at a time, each waits a memory latency.
    a.flat = a.aligned && !config().pair_flat_disabled &&
             std::max(send_items, recv_items) > static_cast<std::uint64_t>(threads);
    last_stream_used_ = true;
    last_local_.store(false, std::memory_order_relaxed);
    last_exchange_.store(true, std::memory_order_relaxed);
    last_kind_.store(op.kind, std::memory_order_relaxed);
    last_channels_.store(channels, std::memory_order_relaxed);
    last_slots_.store(0, std::memory_order_relaxed);
    last_word_.store(n <= 2 ? 2 : n <= 4 ? 4 : 8, std::memory_order_relaxed);
    return cuda::check(launch_pair(a, threads, stream), "launching the pair exchange kernel");
  }

  // Packets of a box that holds one channel's slice of any message up to `largest` cut in `channels`:
  // a channel's share (exchange_channel_bytes) or, where the channels run out, the largest's slice.
  std::uint64_t box_packets_for(std::uint64_t largest, int channels) const {
    const std::uint64_t share = (std::min(policy_.exchange_channel_bytes, largest) + 15) / 16 * 16;
    return atom::ll_packets(std::max(share, exchange_slice(Part{nullptr, largest}, 0, channels).bytes));
  }

  int exchange_channels_for(std::uint64_t largest) const {
    const std::uint64_t per = std::max<std::uint64_t>(policy_.exchange_channel_bytes, 16);
    const std::uint64_t want = (largest + per - 1) / per;
    return static_cast<int>(std::clamp<std::uint64_t>(want, 1, static_cast<std::uint64_t>(policy_.exchange_channels)));
  }

  // Whether the latency exchange runs `op`: a collective it has a kernel for, every message within
  // the policy's bound, and buffers laid out as the shim lays out uniform calls (the kernel derives
  // every part from a base and a size; the check compares them with op's). Fills *x and *threads.
  bool exchange_plan(const Op& op, ExchangeArgs* x, int* threads) const {
    if (!exchange_bytes_ || !exchange_serves(op.kind) || op.in.empty() || op.out.empty()) return false;
    std::uint64_t largest = 0, total_in = 0, total_out = 0;
    // The word kernels take whole 8-byte words at aligned addresses.
    bool words = true;
    for (const Part& p : op.in) {
      largest = std::max(largest, p.bytes);
      total_in += p.bytes;
      words = words && reinterpret_cast<std::uintptr_t>(p.ptr) % 8 == 0 && p.bytes % 8 == 0;
    }
    for (const Part& p : op.out) {
      largest = std::max(largest, p.bytes);
      total_out += p.bytes;
      words = words && reinterpret_cast<std::uintptr_t>(p.ptr) % 8 == 0 && p.bytes % 8 == 0;
    }
    if (largest == 0 || largest > policy_.exchange_max_bytes) return false;
    const int n = xargs_.nranks;
    using Form = UniformSide::Form;
    const auto side = [&](const std::vector<Part>& parts, Form form) {
      UniformSide u;
      u.form = form;
      u.base = parts.front().ptr;
      u.elem = static_cast<std::uint32_t>(size_of(op.type));
      if (form == Form::shards) {
        for (const Part& p : parts) u.bytes += p.bytes;
        // The plan's shards (snac/runtime/communicator.cc), as coll::uniform_split cuts them.
        u.align_elems = coll::shard_align_elems(u.elem);
      } else {
        u.bytes = parts.front().bytes;
      }
      return u;
    };
    Form fin = Form::packed, fout = Form::packed;
    switch (op.kind) {
      case CollKind::all_reduce:
      case CollKind::reduce: fin = fout = Form::shards; break;
      case CollKind::reduce_scatter: fin = Form::blocks; break;
      case CollKind::all_gather: fout = Form::blocks; break;
      case CollKind::all_to_all: fin = fout = Form::blocks; break;
      case CollKind::gather: fout = Form::blocks; break;
      case CollKind::scatter: fin = Form::blocks; break;
      default: break;  // the direct forms: packed to packed
    }
    // Every rank of the call must take the same path (exchange_call_size).
    if (exchange_call_size(total_in, total_out, largest, n, fin == Form::blocks || fout == Form::blocks) >=
        policy_.exchange_call_bytes)
      return false;
    ExchangeArgs a = xargs_;
    a.in = side(op.in, fin);
    a.out = side(op.out, fout);
    if (static_cast<std::size_t>(a.in.parts(n)) != op.in.size() || static_cast<std::size_t>(a.out.parts(n)) != op.out.size())
      return false;
    // A side this rank has no buffer for (a Reduce's or Gather's output away from the root: a null
    // base, its parts null or offsets from null, as the caller cut them) has no pointers to compare;
    // only sizes count.
    for (int k = 0; k < a.in.parts(n); ++k) {
      const Part p = a.in.part(k, n);
      if (p.bytes != op.in[k].bytes || (p.bytes && a.in.base && p.ptr != op.in[k].ptr)) return false;
    }
    for (int k = 0; k < a.out.parts(n); ++k) {
      const Part p = a.out.part(k, n);
      if (p.bytes != op.out[k].bytes || (p.bytes && a.out.base && p.ptr != op.out[k].ptr)) return false;
    }
    a.channels = exchange_channels_for(largest);
    a.in.prepare(n, a.channels);
    a.out.prepare(n, a.channels);
    a.root = op.root;
    a.type = op.type;
    a.op = op.op;
    // A thread per batch of words of a channel's slice (atom::ll_batch_words), in whole warps.
    const std::uint64_t packets = atom::ll_packets(exchange_slice(Part{nullptr, largest}, 0, a.channels).bytes);
    const std::uint64_t per = static_cast<std::uint64_t>(atom::ll_batch_words(n - 1));
    *threads = static_cast<int>(std::clamp<std::uint64_t>(((packets + per - 1) / per + 31) / 32 * 32, 32, kExchangeMaxThreads));
    a.word = words ? exchange_word_ranks(op.kind, a) : 0;
    a.slots = a.word ? 0 : exchange_lean_slots(op.kind, a, packets, *threads);
    *x = a;
    return true;
  }

  // Channels for one call: those of its largest part (part_channels), which the kernel cuts every
  // part by, each by its own size.
  int channels_for(const Op& op) const {
    std::uint64_t largest = 0;
    for (const Part& p : op.in) largest = std::max(largest, p.bytes);
    for (const Part& p : op.out) largest = std::max(largest, p.bytes);
    return part_channels(largest, policy_.channel_bytes, least_part_channels(op), channels_);
  }
  // Point-to-point messages spread over at least this many channels (in slices of at least
  // kSliceGrain): on one H200 under MPS, a 16 KiB Send/Recv in one channel took about 1.3 us longer
  // than over 8 (2 ranks), and 2.4 us longer with 8 ranks.
  static constexpr int kPointToPointChannels = 8;
  static int least_part_channels(const Op& op) {
    return op.kind == CollKind::send_recv || op.kind == CollKind::all_to_all_v ? kPointToPointChannels : 1;
  }

  // The private input copy only grows. A replaced buffer is kept until the communicator is
  // destroyed (a captured graph may still read it); allocation never synchronises the device, which
  // would stall ranks sharing this process while their peers' kernels wait for them.
  Status ensure_copy(std::uint64_t bytes) {
    if (bytes <= copy_bytes_) return Status::ok;
    // Allowed while the calling thread captures a graph: the allocation is not a stream operation.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    void* fresh = nullptr;
    cudaError_t e = cudaMalloc(&fresh, bytes);
    cudaThreadExchangeStreamCaptureMode(&mode);
    PURLIN_TRY(cuda::check(e, "cudaMalloc(private AllToAll input)"));
    if (copy_) retired_.push_back(copy_);
    copy_ = static_cast<char*>(fresh);
    copy_bytes_ = bytes;
    held_ += bytes;  // the replaced buffer stays held too
    return Status::ok;
  }

  // The window: cuMem where every rank can use it and some peer is another process (each importer
  // then holds the memory, so a peer that dies never unmaps a window under a running kernel), else
  // cudaMalloc shared by legacy CUDA IPC. Every rank must choose alike: they agree first.
  Status alloc_window(Bootstrap& boot, std::uint64_t bytes) {
    const int n = boot.nranks();
    bool vmm = !config().cumem_disabled && cuda::vmm_fd_supported(device_);
    if (vmm && cuda::vmm_alloc(device_, bytes, &own_vmm_) != Status::ok) {
      log::info(log::kInit, "SM datapath: cuMem allocation failed, sharing the window by CUDA IPC");
      vmm = false;
    }
    struct Vote {
      std::int32_t pid;
      std::int32_t vmm;
    } mine{getpid(), vmm ? 1 : 0};
    std::vector<Vote> votes(static_cast<std::size_t>(n));
    Status s = boot.all_gather(&mine, sizeof(Vote), votes.data());
    bool others = false, all_vmm = true;
    for (const Vote& v : votes) {
      others = others || v.pid != mine.pid;
      all_vmm = all_vmm && v.vmm;
    }
    if (s == Status::ok && vmm && others && all_vmm) s = FdMailbox::open(&mailbox_);
    // The mailbox is open exactly when every rank shares by cuMem and nothing failed.
    if (!mailbox_) {
      if (own_vmm_.ptr) cuda::vmm_free(&own_vmm_);
      PURLIN_TRY(s);
      return hold(bytes, &window_);
    }
    window_ = own_vmm_.ptr;
    held_ += own_vmm_.bytes;
    return Status::ok;
  }

  // Zero-filled device memory of this communicator (cuda::alloc), counted in device_bytes().
  template <class T>
  Status hold(std::size_t bytes, T** ptr) {
    PURLIN_TRY(cuda::alloc(bytes, reinterpret_cast<void**>(ptr)));
    held_ += bytes;
    return Status::ok;
  }

  Policy policy_;
  int device_ = 0;
  int channels_ = 1;
  WindowGeometry geo_{};
  void* window_ = nullptr;
  Window* windows_dev_ = nullptr;
  LocalState* state_ = nullptr;
  char* scratch_ = nullptr;
  std::uint64_t scratch_bytes_ = 0;
  unsigned* done_ = nullptr;
  std::uint64_t exchange_off_ = 0, exchange_bytes_ = 0, box_packets_ = 0, pair_box_packets_ = 0;
  atom::LLPacket** inbox_dev_ = nullptr;
  std::uint64_t* stamps_ = nullptr;
  std::uint64_t* zs_stamps_ = nullptr;  // zero-staging's stamps (PURLIN_STAMPS)
  std::uint64_t* exchange_epoch_ = nullptr;
  // The pair exchange (Send/Recv rounds): its boxes and ack words in the window, every rank's as
  // mapped here, and this rank's message counts per peer and channel.
  std::uint64_t pair_off_ = 0, pair_bytes_ = 0, acks_off_ = 0;
  atom::LLPacket** pbox_dev_ = nullptr;
  std::uint64_t** acks_dev_ = nullptr;
  std::uint64_t* pair_sent_ = nullptr;
  std::uint64_t* pair_taken_ = nullptr;
  ExchangeArgs xargs_{};
  std::array<ExchangeMemo, kExchangeMemos> memos_{};
  std::size_t memos_used_ = 0, memos_next_ = 0;
  std::atomic<bool> last_exchange_{false};
  std::atomic<bool> last_zero_staging_{false};
  std::atomic<bool> last_ce_{false};
  std::unique_ptr<PeerBuffers> peers_;
  std::uint64_t collectives_ = 0;            // this rank's collectives so far (not Send/Recv rounds)
  std::vector<std::uint64_t*> fault_words_;  // every rank's channel-0 fault word as mapped here
  std::uint64_t zs_off_ = 0;
  std::vector<std::uint64_t*> zs_words_;  // every rank's barrier words as mapped here
  // The node of this executor's last captured zero-staging launch, and its capture's id.
  cudaGraphNode_t zs_node_ = nullptr;
  unsigned long long zs_capture_ = 0;
  // Zero-staged Send/Recv: the board its messages' ends meet on, every rank's leg words as mapped
  // here, this rank's leg call numbers (device), and the stream a round's legs run on beside its
  // staged messages.
  std::unique_ptr<PairBoard> board_;
  std::uint64_t legs_off_ = 0;
  std::vector<std::uint64_t*> leg_words_;
  std::uint64_t* leg_calls_ = nullptr;
  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  std::uint64_t* zs_calls_ = nullptr;
  char* copy_ = nullptr;
  std::uint64_t copy_bytes_ = 0;
  std::atomic<std::uint64_t> held_{0};  // device_bytes(): every allocation above, retired copies too
  void* flags_host_ = nullptr;
  volatile int* abort_host_ = nullptr;
  volatile int* error_host_ = nullptr;
  std::vector<void*> imported_;
  cuda::VmmMapping own_vmm_;
  std::vector<cuda::VmmMapping> imported_vmm_;
  std::vector<int> imported_from_;      // the rank whose window each of imported_vmm_ maps
  std::vector<int> other_processes_;    // the ranks of other processes (windows shared by descriptors)
  std::unique_ptr<FdMailbox> mailbox_;  // during init only
  std::unique_ptr<char[]> suspended_window_;  // the window's contents while suspended
  std::vector<char*> retired_;
  KernelArgs args_{};
  bool last_stream_used_ = false;
  std::atomic<CollKind> last_kind_{CollKind::all_reduce};
  std::atomic<int> last_channels_{0};
  std::atomic<int> last_slots_{0};
  std::atomic<int> last_word_{0};
  std::atomic<bool> last_local_{false};
};

}  // namespace

int sm_resident_ctas_per_sm(int device) {
  if (cuda::set_device(device) != Status::ok) return 0;
  return snac_ctas_per_sm();
}

int zero_staging_resident_ctas_per_sm(int device) {
  if (cuda::set_device(device) != Status::ok) return 0;
  return zero_staging_ctas_per_sm();
}

Status make_sm_executor(const ExecutorArgs& args, std::unique_ptr<Executor>* out) {
  auto exec = std::make_unique<SmExecutor>();
  PURLIN_TRY(exec->init(args, std::max(1, args.policy.workers)));
  *out = std::move(exec);
  return Status::ok;
}

}  // namespace purlin::snac
