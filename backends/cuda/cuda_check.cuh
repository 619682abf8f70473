// CUDA error checking and RAII handles (device/pinned memory, streams, events, current device).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "core/error.h"

namespace tf::backend::cuda {

// Throws core::RuntimeFailure naming the call, file:line and the CUDA error. Clears the
// (non-sticky) error so that later calls do not report it again.
[[noreturn]] inline void cuda_fail(cudaError_t e, const char* call, const char* file, int line) {
  (void)cudaGetLastError();
  throw core::RuntimeFailure(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                             cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")");
}

#define TF_CUDA_CHECK(expr)                                                                                   \
  do {                                                                                                        \
    const cudaError_t tf_cuda_err_ = (expr);                                                                  \
    if (tf_cuda_err_ != cudaSuccess) ::tf::backend::cuda::cuda_fail(tf_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors, naming the kernel.
#define TF_CUDA_CHECK_LAUNCH(name)                                                         \
  do {                                                                                     \
    const cudaError_t tf_cuda_err_ = cudaGetLastError();                                   \
    if (tf_cuda_err_ != cudaSuccess)                                                       \
      ::tf::backend::cuda::cuda_fail(tf_cuda_err_, "launch of " name, __FILE__, __LINE__); \
  } while (0)

// Device memory (cudaMalloc), owning.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(size_t bytes) : bytes_(bytes) {
    if (bytes) TF_CUDA_CHECK(cudaMalloc(&p_, bytes));
  }
  ~DeviceMemory() {
    if (p_) (void)cudaFree(p_);  // never throws from a destructor
  }
  DeviceMemory(DeviceMemory&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    if (this != &o) {
      if (p_) (void)cudaFree(p_);
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* get() const { return p_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }
  // Grow-only: reallocates (contents lost) when fewer than `bytes` are held.
  void reserve(size_t bytes) {
    if (bytes > bytes_) *this = DeviceMemory(bytes);
  }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory (cudaMallocHost), owning.
class PinnedMemory {
 public:
  PinnedMemory() = default;
  explicit PinnedMemory(size_t bytes) : bytes_(bytes) {
    if (bytes) TF_CUDA_CHECK(cudaMallocHost(&p_, bytes));
  }
  ~PinnedMemory() {
    if (p_) (void)cudaFreeHost(p_);
  }
  PinnedMemory(PinnedMemory&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedMemory& operator=(PinnedMemory&& o) noexcept {
    if (this != &o) {
      if (p_) (void)cudaFreeHost(p_);
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;
  void* get() const { return p_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return bytes_; }
  void reserve(size_t bytes) {
    if (bytes > bytes_) *this = PinnedMemory(bytes);
  }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// A non-blocking stream, owning.
class Stream {
 public:
  Stream() { TF_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() {
    if (s_) (void)cudaStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  void sync() const { TF_CUDA_CHECK(cudaStreamSynchronize(s_)); }

 private:
  cudaStream_t s_ = nullptr;
};

// A timing event, owning.
class Event {
 public:
  Event() { TF_CUDA_CHECK(cudaEventCreate(&e_)); }
  explicit Event(unsigned flags) { TF_CUDA_CHECK(cudaEventCreateWithFlags(&e_, flags)); }
  ~Event() {
    if (e_) (void)cudaEventDestroy(e_);
  }
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&&) = delete;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }
  void record(cudaStream_t s) { TF_CUDA_CHECK(cudaEventRecord(e_, s)); }

 private:
  cudaEvent_t e_ = nullptr;
};

// Makes `device` current for the scope and restores the previous device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    TF_CUDA_CHECK(cudaGetDevice(&prev_));
    if (prev_ != device) TF_CUDA_CHECK(cudaSetDevice(device));
    changed_ = prev_ != device;
  }
  ~DeviceGuard() {
    if (changed_) (void)cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
  bool changed_ = false;
};

// Milliseconds between two recorded events.
// Sets how this process's threads wait for the current device (`sched`: cudaDeviceScheduleSpin, _Yield or
// _BlockingSync), its other flags kept. CUDA 12 overwrites the flags of a device already initialized.
inline void set_device_schedule(unsigned sched) {
  unsigned flags = 0;
  TF_CUDA_CHECK(cudaGetDeviceFlags(&flags));
  TF_CUDA_CHECK(cudaSetDeviceFlags((flags & ~unsigned(cudaDeviceScheduleMask)) | sched));
}

inline float elapsed_ms(const Event& a, const Event& b) {
  float ms = 0;
  TF_CUDA_CHECK(cudaEventElapsedTime(&ms, a.get(), b.get()));
  return ms;
}

}  // namespace tf::backend::cuda
