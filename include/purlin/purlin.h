/* Purlin's additions to the NCCL API: what nccl.h cannot say. Exported from libnccl.so.2 under the
 * nccl prefix (ncclPurlin*), so the library still exports only nccl and pnccl names.
 *
 * The V collectives take partition sizes and displacements (in elements) per rank at run time; they
 * run as one fused execution like their uniform counterparts, on every datapath, and can be captured
 * in a CUDA graph. Counts must agree between ranks (rank r's recvcounts[s] equals rank s's count for
 * r), as with MPI.
 *
 * Reductions are always deterministic: each element is folded over ranks in order 0..n-1, in fp32 for
 * 16- and 8-bit floating types. ncclPurlinReductionMode reports it.
 */
#ifndef PURLIN_PURLIN_H_
#define PURLIN_PURLIN_H_

#include <nccl.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every rank contributes sendcount elements; rank s's lands at recvbuff + displs[s], recvcounts[s]
 * elements (equal to rank s's sendcount). */
ncclResult_t ncclPurlinAllGatherV(const void* sendbuff, size_t sendcount, void* recvbuff, const size_t* recvcounts,
                                  const size_t* displs, ncclDataType_t datatype, ncclComm_t comm,
                                  cudaStream_t stream);

/* Partition r of every rank's sendbuff (recvcounts[r] elements at senddispls[r]) is reduced, in rank
 * order, into rank r's recvbuff. */
ncclResult_t ncclPurlinReduceScatterV(const void* sendbuff, const size_t* recvcounts, const size_t* senddispls,
                                      void* recvbuff, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream);

/* sendcounts[r] elements at sdispls[r] go to rank r; recvcounts[s] elements from rank s land at
 * rdispls[s]. No send partition may overlap a receive partition (ncclInvalidArgument): not in place. */
ncclResult_t ncclPurlinAlltoAllV(const void* sendbuff, const size_t* sendcounts, const size_t* sdispls,
                                 void* recvbuff, const size_t* recvcounts, const size_t* rdispls,
                                 ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/* The reduction mode in force: 1 = deterministic (rank-ordered, fp32 accumulation for narrow floats),
 * the only one offered. */
ncclResult_t ncclPurlinReductionMode(ncclComm_t comm, int* mode);

#ifdef __cplusplus
}
#endif

#endif /* PURLIN_PURLIN_H_ */
