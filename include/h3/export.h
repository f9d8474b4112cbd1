// What libh3-engine exports to applications (pkg-config h3-engine, docs/engine.md "Embedding the
// engine"): the library is built with hidden visibility and keeps the engine's internals and
// LibTorch's symbols to itself; a class or function marked H3_API is its public face.
#pragma once

#define H3_API __attribute__((visibility("default")))
