// A stand-in for InfiniCCL's public header (the part torch-infini calls),
// for tests/cpp/test_infiniccl_engine.cpp: same names, values and
// signatures as InfiniCCL's API, none of its code.
#pragma once

#include <cstddef>

extern "C" {

#define INFINICCL_UNIQUE_ID_BYTES 128

typedef enum {
  infinicclSuccess = 0,
  infinicclUnhandledError = 1,
  infinicclSystemError = 2,
  infinicclInternalError = 3,
  infinicclInvalidArgument = 4,
  infinicclInvalidUsage = 5,
  infinicclRemoteError = 6,
  infinicclInProgress = 7,
  infinicclNotSupported = 8,
} infinicclResult_t;

typedef enum {
  infinicclInt8 = 0,
  infinicclInt16 = 1,
  infinicclInt32 = 2,
  infinicclInt64 = 3,
  infinicclUInt8 = 4,
  infinicclUInt16 = 5,
  infinicclUInt32 = 6,
  infinicclUInt64 = 7,
  infinicclFloat16 = 8,
  infinicclBFloat16 = 9,
  infinicclFloat32 = 10,
  infinicclFloat64 = 11,
} infinicclDataType_t;

typedef enum {
  infinicclSum = 0,
  infinicclProd = 1,
  infinicclMax = 2,
  infinicclMin = 3,
  infinicclAvg = 4,
} infinicclRedOp_t;

typedef void* infinicclComm_t;

typedef struct {
  char internal[INFINICCL_UNIQUE_ID_BYTES];
} infinicclUniqueId;

infinicclResult_t infinicclGetUniqueId(infinicclUniqueId* id);
infinicclResult_t infinicclCommInitRank(infinicclComm_t* comm, int nranks, infinicclUniqueId id,
                                        int rank);
infinicclResult_t infinicclCommDestroy(infinicclComm_t comm);
infinicclResult_t infinicclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                     infinicclDataType_t datatype, infinicclRedOp_t op,
                                     infinicclComm_t comm, void* stream);
}
