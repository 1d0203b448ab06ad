// GoogleTest under mpirun, shared by the tests that run on several ranks: every rank runs every
// test (the same collectives in the same order); only rank 0 prints its report; the exit code is
// nonzero on every rank when any rank failed. `run` runs the tests (RUN_ALL_TESTS, inside whatever
// it sets up, such as a communicator that must be gone before MPI_Finalize) and returns its result.
#pragma once

#include <gtest/gtest.h>

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstdio>

template <class Run>
int run_tests_on_every_rank(int argc, char** argv, Run run) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {  // one report: rank 0's (failures elsewhere still fail the run below)
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = run(rank) != 0 ? 1 : 0;
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any && !failed) std::fprintf(stderr, "rank %d passed, but another rank failed\n", rank);
  MPI_Finalize();
  return any;
}
