// NCCL 2.29 and 2.30's additions to the API, restated: the library builds against NCCL 2.28's
// nccl.h (the toolkit's), and programs built against a newer one link these names too. Types and
// layouts as NCCL 2.30.7's nccl.h and nccl_device/core.h declare them.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 29, 0)

#define NCCL_SUSPEND_MEM 0x01  // ncclCommSuspend: release the communicator's dynamic GPU memory

typedef enum {
  ncclStatGpuMemSuspend = 0,    // GPU memory that can be suspended (bytes)
  ncclStatGpuMemSuspended = 1,  // whether it is suspended (0 or 1)
  ncclStatGpuMemPersist = 2,    // GPU memory that cannot be suspended (bytes)
  ncclStatGpuMemTotal = 3       // all GPU memory of the communicator (bytes)
} ncclCommMemStat_t;

typedef struct {
  int opCnt;
  int peer;
  int sigIdx;
  int ctx;
} ncclWaitSignalDesc_t;

typedef struct ncclParamHandle* ncclParamHandle_t;

typedef enum {
  NCCL_GIN_TYPE_NONE = 0,
  NCCL_GIN_TYPE_PROXY = 2,
  NCCL_GIN_TYPE_GDAKI = 3,
  NCCL_GIN_TYPE_GPI = 4,
} ncclGinType_t;

// ncclCommQueryProperties' answer; the fields from nLsaTeams on exist from version 2.29.4.
typedef struct ncclCommProperties {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int rank;
  int nRanks;
  int cudaDev;
  int nvmlDev;
  bool deviceApiSupport;
  bool multimemSupport;
  ncclGinType_t ginType;
  int nLsaTeams;
  bool hostRmaSupport;
  ncclGinType_t railedGinType;
} ncclCommProperties_t;

extern "C" {
ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm,
                          ncclConfig_t* config);
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclCommResume(ncclComm_t comm);
ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);
ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr);
ncclResult_t ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer, ncclWindow_t peerWin,
                           size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclParamBind(ncclParamHandle_t* out, const char* key);
ncclResult_t ncclParamGetI8(ncclParamHandle_t h, int8_t* out);
ncclResult_t ncclParamGetI16(ncclParamHandle_t h, int16_t* out);
ncclResult_t ncclParamGetI32(ncclParamHandle_t h, int32_t* out);
ncclResult_t ncclParamGetI64(ncclParamHandle_t h, int64_t* out);
ncclResult_t ncclParamGetU8(ncclParamHandle_t h, uint8_t* out);
ncclResult_t ncclParamGetU16(ncclParamHandle_t h, uint16_t* out);
ncclResult_t ncclParamGetU32(ncclParamHandle_t h, uint32_t* out);
ncclResult_t ncclParamGetU64(ncclParamHandle_t h, uint64_t* out);
ncclResult_t ncclParamGetStr(ncclParamHandle_t h, const char** out);
ncclResult_t ncclParamGet(ncclParamHandle_t h, void* out, int maxLen, int* len);
ncclResult_t ncclParamGetParameter(const char* key, const char** value, int* valueLen);
ncclResult_t ncclParamGetAllParameterKeys(const char*** table, int* tableLen);
void ncclParamDumpAll(void);
void ncclResetDebugInit(void);
ncclResult_t ncclCommQueryProperties(ncclComm_t comm, ncclCommProperties_t* props);
ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void** outPtr);
ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank, void** outPtr);
ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr);
}

#endif

// ncclConfig_t as NCCL 2.30.7's nccl.h lays it out: the toolkit's ncclConfig_t, then the fields
// 2.29 and 2.30 added. Programs built against a newer header pass it whole.
struct PurlinConfigV23000 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
  int graphUsageMode;       // 2.29
  int numRmaCtx;            // 2.29
  int maxP2pPeers;          // 2.30
  int graphStreamOrdering;  // 2.30.5
};
static_assert(offsetof(PurlinConfigV23000, nvlinkCentricSched) == offsetof(ncclConfig_t, nvlinkCentricSched));
static_assert(sizeof(ncclConfig_t) <= sizeof(PurlinConfigV23000));

// The device API's multicast handle, passed by value (nccl_device/impl/core__types.h).
struct PurlinMultimemHandle {
  void* mcBasePtr;
};
