// A small C++20 stand-in for <metal_stdlib>: enough of Metal's keywords, address spaces, vector types,
// as_type and barriers to compile the metal target's kernels with g++ and run them on the CPU, one
// std::thread per thread of a threadgroup (so threadgroup_barrier really waits), groups one after another.
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#define kernel
#define device
#define constant
// threadgroup arrays are shared by the threads of a group; groups run one after another, so a static will do
#define threadgroup static

typedef unsigned char uchar; typedef unsigned short ushort; typedef unsigned int uint; typedef unsigned long ulong;
typedef _Float16 half;

// Metal 3.1's bfloat: 16 bits, arithmetic through float (the emitter casts every result back)
struct bfloat {
  ushort bits;
  bfloat() = default;
  bfloat(float f) { uint u; std::memcpy(&u, &f, 4); bits = f != f ? 0x7FC0 : (ushort)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16); }
  bfloat(double d) : bfloat((float)d) {}
  template <class T, class = std::enable_if_t<std::is_integral_v<T>>> bfloat(T i) : bfloat((float)i) {}
  bfloat(half h) : bfloat((float)h) {}
  operator float() const { uint u = (uint)bits << 16; float f; std::memcpy(&f, &u, 4); return f; }
};

#define TG_VEC(T, N)                                                                                   \
  struct T##2 { T x, y; T##2() = default; T##2(T a, T b) : x(a), y(b) {} };                            \
  struct T##3 { T x, y, z; T##3() = default; T##3(T a, T b, T c) : x(a), y(b), z(c) {} };              \
  struct T##4 { T x, y, z, w; T##4() = default; T##4(T a, T b, T c, T d) : x(a), y(b), z(c), w(d) {} };
TG_VEC(bool, 0) TG_VEC(char, 0) TG_VEC(uchar, 0) TG_VEC(short, 0) TG_VEC(ushort, 0) TG_VEC(int, 0) TG_VEC(uint, 0)
TG_VEC(long, 0) TG_VEC(ulong, 0) TG_VEC(half, 0) TG_VEC(bfloat, 0) TG_VEC(float, 0)

namespace metal {
using std::exp2; using std::log2; using std::sin; using std::sqrt; using std::trunc; using std::fmod;
inline half exp2(half x) { return (half)std::exp2((float)x); }
inline half log2(half x) { return (half)std::log2((float)x); }
inline half sin(half x) { return (half)std::sin((float)x); }
inline half sqrt(half x) { return (half)std::sqrt((float)x); }
inline half trunc(half x) { return (half)std::trunc((float)x); }
inline half fmod(half x, half y) { return (half)std::fmod((float)x, (float)y); }
template <class T, class F> inline T as_type(F x) { static_assert(sizeof(T) == sizeof(F)); T t; std::memcpy(&t, &x, sizeof(T)); return t; }
enum class mem_flags { mem_none, mem_device, mem_threadgroup };
inline thread_local std::barrier<> *tg_barrier = nullptr;
inline void threadgroup_barrier(mem_flags) { if (tg_barrier) tg_barrier->arrive_and_wait(); }
}  // namespace metal


// Run f(gid, lid) over a grid of gs threadgroups of ls threads each.
inline void tg_launch(const std::function<void(uint3, uint3)> &f, uint3 gs, uint3 ls) {
  uint n = ls.x * ls.y * ls.z;
  for (uint gz = 0; gz < gs.z; gz++) for (uint gy = 0; gy < gs.y; gy++) for (uint gx = 0; gx < gs.x; gx++) {
    uint3 g(gx, gy, gz);
    if (n == 1) { f(g, uint3(0, 0, 0)); continue; }
    std::barrier<> bar((std::ptrdiff_t)n);
    std::vector<std::thread> ts;
    for (uint lz = 0; lz < ls.z; lz++) for (uint ly = 0; ly < ls.y; ly++) for (uint lx = 0; lx < ls.x; lx++)
      ts.emplace_back([&, l = uint3(lx, ly, lz)] { metal::tg_barrier = &bar; f(g, l); });
    for (auto &t : ts) t.join();
  }
}
