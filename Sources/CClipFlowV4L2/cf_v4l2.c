#include "cf_v4l2.h"
