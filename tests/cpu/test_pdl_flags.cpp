// WEAVE_GEMM_PDL's rule (gemm/pdl_flags.hpp): every accepted form maps to its flags, the default
// is the ring with the trigger after the producer's last load, and anything else is refused naming
// the variable.
#include <gtest/gtest.h>

#include "gemm/kernel_args.hpp"
#include "gemm/pdl_flags.hpp"
#include "weave/error.hpp"

using namespace weave;
using namespace weave::gemm;

TEST(PdlFlags, EveryFormMapsToItsFlags) {
  EXPECT_EQ(parse_pdl_flags(""), kPdlWait | kPdlBIntoRing | kPdlTriggerLate);
  EXPECT_EQ(describe_pdl_flags(parse_pdl_flags("")), "ring,late");
  EXPECT_EQ(parse_pdl_flags("ring,late"), kPdlWait | kPdlBIntoRing | kPdlTriggerLate);
  EXPECT_EQ(parse_pdl_flags("none,exit"), kPdlWait);
  EXPECT_EQ(parse_pdl_flags("l2:16,start"), kPdlWait | kPdlBIntoL2 | kPdlTriggerAtStart | (16u << 8));
  for (const char* text : {"ring,start", "ring,late", "ring,exit", "l2:1,late", "l2:64,exit", "none,start"})
    EXPECT_EQ(describe_pdl_flags(parse_pdl_flags(text)), text);
}

TEST(PdlFlags, AnythingElseIsRefusedNamingTheVariable) {
  for (const char* text : {"ring", "ring,", "l2:0,start", "l2:65,start", "l2:8x,start", "smem,start", "ring,early",
                           ",start", "ring,start,late"}) {
    try {
      parse_pdl_flags(text);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("WEAVE_GEMM_PDL='" + std::string(text) + "'"), std::string::npos) << e.what();
    }
  }
}
