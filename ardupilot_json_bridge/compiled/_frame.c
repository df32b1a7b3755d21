/*
 * A lock-step frame's hot path, compiled (issue 32): each rule written once, here.
 *
 * The Python modules that own a rule call it from here (core/protocol.py: the servo packet
 * and the reply's mandatory values; core/frames.py: ROS to ArduPilot conventions; core/pwm.py:
 * PWM to commands; sources/mujoco_vehicle.py: the rotors' lag, the step and the sensors), and
 * FrameLoop serves SITL with the same code where no interpreter runs: datagram in, PWM to
 * commands, physics, sensors, reply out, for the plain next frame of a session. Anything else
 * (a first frame, a restart, a resend, a stranger, a bad packet) goes back to the Python link
 * (sources/compiled_frames.py), which drains the frames served meanwhile into its bookkeeping.
 *
 * MuJoCo is reached through the functions of the wheel's own library and the bindings' own
 * model and data (their addresses, from Python): no MuJoCo header is needed to build this.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* pipe2; as pyconfig.h defines it */
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arpa/inet.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAGIC_16 18458
#define MAGIC_32 29569
#define SERVO_HEADER 8
#define MAX_CHANNELS 32
#define MAX_ACTUATORS 64
#define MAX_DATAGRAM 65536
#define REPLY_CAPACITY 640
/* SITL stores most values as float32: anything larger would read back as infinity. */
#define FLOAT32_MAX 3.4028234663852886e38
#define HALF_SQRT2 0.70710678118654757
#define MJ_STATE_TIME 1

typedef void (*mj_step_fn)(const void *model, void *data);
typedef void (*mj_get_state_fn)(const void *model, const void *data, double *state, int spec);

/* ---- The servo packet ------------------------------------------------------------------ */

typedef struct {
  unsigned rate;
  uint32_t count;
  int channels;
  uint16_t pwm[MAX_CHANNELS];
} Servo;

/* Little-endian unsigned integers of the servo packet, whatever the host's byte order. */
static uint32_t little(const uint8_t *bytes, int size) {
  uint32_t value = 0;
  for (int i = size - 1; i >= 0; i--) value = value << 8 | bytes[i];
  return value;
}

/* Decode a 16- or 32-channel servo packet; 0 where data is none. */
static int decode_servo(const uint8_t *data, Py_ssize_t size, Servo *servo) {
  if (size < 2) return 0;
  unsigned magic = little(data, 2);
  int channels = magic == MAGIC_16 && size == SERVO_HEADER + 32   ? 16
                 : magic == MAGIC_32 && size == SERVO_HEADER + 64 ? 32
                                                                  : 0;
  if (!channels) return 0;
  servo->rate = little(data + 2, 2);
  servo->count = little(data + 4, 4);
  servo->channels = channels;
  for (int i = 0; i < channels; i++)
    servo->pwm[i] = (uint16_t)little(data + SERVO_HEADER + 2 * i, 2);
  return 1;
}

static PyObject *py_decode_servo(PyObject *module, PyObject *arg) {
  Py_buffer view;
  if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
  Servo servo;
  int ok = decode_servo(view.buf, view.len, &servo);
  PyBuffer_Release(&view);
  if (!ok) Py_RETURN_NONE;
  PyObject *pwm = PyTuple_New(servo.channels);
  if (!pwm) return NULL;
  for (int i = 0; i < servo.channels; i++) PyTuple_SET_ITEM(pwm, i, PyLong_FromLong(servo.pwm[i]));
  return Py_BuildValue("(IkN)", servo.rate, (unsigned long)servo.count, pwm);
}

/* ---- Numbers as SITL reads them back ----------------------------------------------------- */

/*
 * printf's %.17g and %.9g give every digit correctly rounded, with multi-precision arithmetic,
 * the costliest of the frame's own code. A number needs less to read back exactly:
 * its digits within half a step of the type it is read into. In 64-bit-mantissa long double
 * arithmetic the scaled value is off by at most about 1e-19 of itself (one product, one power
 * of ten rounded), so the digits are the correctly rounded ones, or one step away when the
 * value lies that close to halfway: 17 digits then stay within 0.52e-16 of a double (half its
 * step is at least 2^-54, 0.55e-16), 9 digits within 0.6e-8 of a float32 (half its step is
 * at least 2^-25, 2.98e-8). With binary128 (113 bits) the margin is wider still; where long
 * double is narrower (double, or double-double), printf writes them.
 */
/* The most a number takes, with its terminating zero: -1.2345678901234567e-308. */
#define NUMBER_ROOM 25
#define POWER_LOW (-32)
#define POWER_HIGH 345
/* x87 extended (64-bit mantissa) and IEEE binary128 (113); not double-double (106). */
#if LDBL_MANT_DIG == 64 || LDBL_MANT_DIG == 113
#define FAST_DIGITS 1
static long double power_of_ten[POWER_HIGH - POWER_LOW + 1];

/* Fill the powers of ten, each correctly rounded (strtold), once at import. */
static void fill_powers_of_ten(void) {
  char text[16];
  for (int k = POWER_LOW; k <= POWER_HIGH; k++) {
    snprintf(text, sizeof(text), "1e%d", k);
    power_of_ten[k - POWER_LOW] = strtold(text, NULL);
  }
}
#else
#define FAST_DIGITS 0
static void fill_powers_of_ten(void) {}
#endif

/* Write value by printf's %.9g or %.17g (digits 9 or 17) to out; return the length. */
static int printed_number(char *out, double value, int digits) {
  return snprintf(out, NUMBER_ROOM, digits == 9 ? "%.9g" : "%.17g", value);
}

/*
 * Write value (finite, |value| <= FLOAT32_MAX) as printf's %.<digits>g would, digits 9 or 17,
 * to out (room for NUMBER_ROOM); return the length. It reads back to the same double (17)
 * or float (9); its last digit may differ from printf's at a near-tie.
 */
static int format_number(char *out, double value, int digits) {
#if FAST_DIGITS
  char *p = out;
  if (signbit(value)) *p++ = '-';
  double magnitude = fabs(value);
  if (magnitude == 0.0) {
    *p++ = '0';
    return (int)(p - out);
  }
  /* log10 may be one off near a power of ten: the scaled value shows it, and is scaled again */
  int exponent = (int)floor(log10(magnitude));
  int shift = digits - 1 - exponent;
  if (shift <= POWER_LOW || shift >= POWER_HIGH)
    return printed_number(out, value, digits);
  long double low = power_of_ten[digits - 1 - POWER_LOW];
  long double high = power_of_ten[digits - POWER_LOW];
  long double scaled = (long double)magnitude * power_of_ten[shift - POWER_LOW];
  if (scaled < low) {
    exponent--;
    scaled = (long double)magnitude * power_of_ten[shift + 1 - POWER_LOW];
  } else if (scaled >= high) {
    exponent++;
    scaled = (long double)magnitude * power_of_ten[shift - 1 - POWER_LOW];
  }
  long long whole = llrintl(scaled);
  if (whole == (long long)high) { /* rounded up to 10^digits: a one and zeros, a power up */
    whole /= 10;
    exponent++;
  }
  if (!(whole >= (long long)low && whole < (long long)high))
    return printed_number(out, value, digits);
  char figures[20];
  for (int i = digits - 1; i >= 0; i--) {
    figures[i] = (char)('0' + whole % 10);
    whole /= 10;
  }
  int significant = digits;
  while (significant > 1 && figures[significant - 1] == '0') significant--;
  if (exponent < -4 || exponent >= digits) {
    *p++ = figures[0];
    if (significant > 1) {
      *p++ = '.';
      memcpy(p, figures + 1, significant - 1);
      p += significant - 1;
    }
    *p++ = 'e';
    *p++ = exponent < 0 ? '-' : '+';
    int power = abs(exponent);
    if (power >= 100) *p++ = (char)('0' + power / 100);
    *p++ = (char)('0' + power / 10 % 10);
    *p++ = (char)('0' + power % 10);
  } else if (exponent >= 0) {
    for (int i = 0; i <= exponent; i++) *p++ = i < significant ? figures[i] : '0';
    if (significant > exponent + 1) {
      *p++ = '.';
      memcpy(p, figures + exponent + 1, significant - exponent - 1);
      p += significant - exponent - 1;
    }
  } else {
    *p++ = '0';
    *p++ = '.';
    for (int i = 0; i < -exponent - 1; i++) *p++ = '0';
    memcpy(p, figures, significant);
    p += significant;
  }
  return (int)(p - out);
#else
  return printed_number(out, value, digits);
#endif
}

/* ---- The reply's mandatory values -------------------------------------------------------- */

/*
 * timestamp, gyro[3], accel_body[3], position[3], quaternion[4], velocity[3]. SITL keeps the
 * timestamp and position as doubles (17 digits read back to the same double) and parses the
 * rest into floats with sscanf's %f: those are rounded to float32 here and written in 9 digits,
 * which read back to exactly that float (format_number).
 */
#define MANDATORY_VALUES 17

static int sendable(const double *values) {
  for (int i = 0; i < MANDATORY_VALUES; i++)
    if (!(values[i] >= -FLOAT32_MAX && values[i] <= FLOAT32_MAX)) return 0;
  return values[0] >= 0.0;
}

/* The mandatory part fits the reply with room for the flags and the closing brace after it. */
#define MANDATORY_ROOM (NUMBER_ROOM * MANDATORY_VALUES + 128)
#define SUFFIX_ROOM 40
_Static_assert(REPLY_CAPACITY - SUFFIX_ROOM >= MANDATORY_ROOM, "a reply holds its numbers");
_Static_assert(sizeof(",\"no_time_sync\":1,\"no_lockstep\":1}\n") <= SUFFIX_ROOM,
               "a reply holds its flags");

/* Append text (a string literal) at p; return the end. */
#define APPEND(p, text) (memcpy((p), "" text, sizeof(text) - 1), (p) + sizeof(text) - 1)

/* Write the reply's mandatory part (no closing brace); its length, or -1 if not sendable. */
static int format_mandatory(char *out, size_t capacity, const double *v) {
  /* The keys and separators before each value, in MANDATORY_VALUES order. */
  static const char *const before[MANDATORY_VALUES] = {
      "\n{\"timestamp\":", ",\"imu\":{\"gyro\":[", ",", ",", "],\"accel_body\":[", ",", ",",
      "]},\"position\":[", ",", ",", "],\"quaternion\":[", ",", ",", ",", "],\"velocity\":[",
      ",", ","};
  if (!sendable(v) || capacity < MANDATORY_ROOM) return -1;
  char *p = out;
  for (int i = 0; i < MANDATORY_VALUES; i++) {
    size_t key = strlen(before[i]);
    memcpy(p, before[i], key);
    p += key;
    int doubled = i == 0 || (i >= 7 && i <= 9);
    p += format_number(p, doubled ? v[i] : (double)(float)v[i], doubled ? 17 : 9);
  }
  *p++ = ']';
  return (int)(p - out);
}

static PyObject *py_format_mandatory(PyObject *module, PyObject *args) {
  double v[MANDATORY_VALUES];
  if (!PyArg_ParseTuple(args, "ddddddddddddddddd", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                        &v[6], &v[7], &v[8], &v[9], &v[10], &v[11], &v[12], &v[13], &v[14],
                        &v[15], &v[16]))
    return NULL;
  char text[REPLY_CAPACITY];
  int size = format_mandatory(text, sizeof(text), v);
  if (size < 0) Py_RETURN_NONE;
  return PyUnicode_FromStringAndSize(text, size);
}

/* ---- ROS conventions to ArduPilot's ------------------------------------------------------- */

/* ENU world to NED: (x, y, z) -> (y, x, -z). */
static void enu_to_ned(const double *in, double *out) {
  double x = in[0], y = in[1], z = in[2];
  out[0] = y;
  out[1] = x;
  out[2] = -z;
}

/* FLU body to FRD: (x, y, z) -> (x, -y, -z). */
static void flu_to_frd(const double *in, double *out) {
  out[0] = in[0];
  out[1] = -in[1];
  out[2] = -in[2];
}

/* The unit quaternion with w >= 0 (q and -q are the same rotation); 0 where it is none. */
static int canonical(double w, double x, double y, double z, double *q) {
  double norm = hypot(hypot(w, x), hypot(y, z));
  if (!isfinite(norm) || norm < 1e-9) return 0;
  if (w < 0.0) norm = -norm;
  q[0] = w / norm;
  q[1] = x / norm;
  q[2] = y / norm;
  q[3] = z / norm;
  return 1;
}

/*
 * ROS orientation (FLU body in ENU, x-y-z-w) to ArduPilot's (FRD body in NED, w-first, w >= 0):
 * Q_NED_ENU * (w, x, y, z) * Q_FLU_FRD multiplied out. 0 where it is no rotation.
 */
static int ros_to_ned_frd(double x, double y, double z, double w, double *q) {
  double h = HALF_SQRT2;
  return canonical(h * w + h * z, h * x + h * y, h * x - h * y, h * w - h * z, q);
}

/* World vector v turned into the body of ROS orientation q = x, y, z, w (its matrix's transpose). */
static void world_to_body(const double *q, const double *v, double *out) {
  double x = q[0], y = q[1], z = q[2], w = q[3];
  double xx = x * x, yy = y * y, zz = z * z, xy = x * y, xz = x * z, yz = y * z;
  double wx = w * x, wy = w * y, wz = w * z;
  out[0] = (1.0 - 2.0 * (yy + zz)) * v[0] + 2.0 * (xy + wz) * v[1] + 2.0 * (xz - wy) * v[2];
  out[1] = 2.0 * (xy - wz) * v[0] + (1.0 - 2.0 * (xx + zz)) * v[1] + 2.0 * (yz + wx) * v[2];
  out[2] = 2.0 * (xz + wy) * v[0] + 2.0 * (yz - wx) * v[1] + (1.0 - 2.0 * (xx + yy)) * v[2];
}

static PyObject *py_canonical(PyObject *module, PyObject *args) {
  double w, x, y, z, q[4];
  if (!PyArg_ParseTuple(args, "dddd", &w, &x, &y, &z)) return NULL;
  if (!canonical(w, x, y, z, q)) Py_RETURN_NONE;
  return Py_BuildValue("(dddd)", q[0], q[1], q[2], q[3]);
}

static int vector_argument(PyObject *arg, double *out) {
  PyObject *items = PySequence_Fast(arg, "a vector is a sequence of 3 numbers");
  if (!items) return 0;
  int ok = PySequence_Fast_GET_SIZE(items) >= 3;
  if (!ok) PyErr_SetString(PyExc_IndexError, "a vector needs 3 numbers");
  for (int i = 0; ok && i < 3; i++) {
    out[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(items, i));
    ok = !(out[i] == -1.0 && PyErr_Occurred());
  }
  Py_DECREF(items);
  return ok;
}

static PyObject *py_enu_to_ned(PyObject *module, PyObject *arg) {
  double in[3], out[3];
  if (!vector_argument(arg, in)) return NULL;
  enu_to_ned(in, out);
  return Py_BuildValue("(ddd)", out[0], out[1], out[2]);
}

static PyObject *py_flu_to_frd(PyObject *module, PyObject *arg) {
  double in[3], out[3];
  if (!vector_argument(arg, in)) return NULL;
  flu_to_frd(in, out);
  return Py_BuildValue("(ddd)", out[0], out[1], out[2]);
}

static PyObject *py_world_to_body(PyObject *module, PyObject *args) {
  double q[4], v[3], out[3];
  if (!PyArg_ParseTuple(args, "(dddd)(ddd)", &q[0], &q[1], &q[2], &q[3], &v[0], &v[1], &v[2]))
    return NULL;
  world_to_body(q, v, out);
  return Py_BuildValue("(ddd)", out[0], out[1], out[2]);
}

static PyObject *py_ros_to_ned_frd(PyObject *module, PyObject *args) {
  double x, y, z, w, q[4];
  if (!PyArg_ParseTuple(args, "dddd", &x, &y, &z, &w)) return NULL;
  if (!ros_to_ned_frd(x, y, z, w, q)) Py_RETURN_NONE;
  return Py_BuildValue("(dddd)", q[0], q[1], q[2], q[3]);
}

/* ---- PWM to commands ---------------------------------------------------------------------- */

/*
 * ardupilot_gazebo's formula: raw = clamp((pwm - servo_min) / (servo_max - servo_min), 0, 1),
 * command = multiplier * (raw + offset). PWM 0 (SITL drives nothing) keeps the last command.
 */
typedef struct {
  PyObject_HEAD
  int outputs;
  int channel[MAX_ACTUATORS];
  double low[MAX_ACTUATORS], high[MAX_ACTUATORS], multiplier[MAX_ACTUATORS],
      offset[MAX_ACTUATORS], value[MAX_ACTUATORS];
} PwmMap;

static double scale_pwm(double pwm, double low, double high, double multiplier, double offset) {
  double raw = (pwm - low) / (high - low);
  raw = raw < 0.0 ? 0.0 : raw > 1.0 ? 1.0 : raw;
  return multiplier * (raw + offset);
}

static void map_pwm(PwmMap *map, const int *pwm, int available) {
  for (int i = 0; i < map->outputs; i++) {
    int channel = map->channel[i];
    if (channel <= available && pwm[channel - 1])
      map->value[i] = scale_pwm(pwm[channel - 1], map->low[i], map->high[i], map->multiplier[i],
                                map->offset[i]);
  }
}

static PyObject *py_scale_pwm(PyObject *module, PyObject *args) {
  double pwm, low, high, multiplier, offset;
  if (!PyArg_ParseTuple(args, "ddddd", &pwm, &low, &high, &multiplier, &offset)) return NULL;
  return PyFloat_FromDouble(scale_pwm(pwm, low, high, multiplier, offset));
}

static int PwmMap_init(PwmMap *self, PyObject *args, PyObject *kwargs) {
  PyObject *plan;
  if (!PyArg_ParseTuple(args, "O", &plan)) return -1;
  PyObject *items = PySequence_Fast(plan, "the plan is a sequence of (channel, servo_min, "
                                          "servo_max, multiplier, offset, initial)");
  if (!items) return -1;
  Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
  if (count > MAX_ACTUATORS) {
    Py_DECREF(items);
    PyErr_Format(PyExc_ValueError, "at most %d outputs, not %zd", MAX_ACTUATORS, count);
    return -1;
  }
  for (Py_ssize_t i = 0; i < count; i++) {
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(items, i), "iddddd", &self->channel[i],
                          &self->low[i], &self->high[i], &self->multiplier[i], &self->offset[i],
                          &self->value[i])) {
      Py_DECREF(items);
      return -1;
    }
    if (self->channel[i] < 1) {
      Py_DECREF(items);
      PyErr_Format(PyExc_ValueError, "SERVO channels count from 1, not %d", self->channel[i]);
      return -1;
    }
  }
  self->outputs = (int)count;
  Py_DECREF(items);
  return 0;
}

static PyObject *PwmMap_commands(PwmMap *self, PyObject *arg) {
  PyObject *items = PySequence_Fast(arg, "PWM is a sequence of integers");
  if (!items) return NULL;
  Py_ssize_t available = PySequence_Fast_GET_SIZE(items);
  int pwm[MAX_CHANNELS];
  int usable = available < MAX_CHANNELS ? (int)available : MAX_CHANNELS;
  for (int i = 0; i < usable; i++) {
    long value = PyLong_AsLong(PySequence_Fast_GET_ITEM(items, i));
    if (value == -1 && PyErr_Occurred()) {
      Py_DECREF(items);
      return NULL;
    }
    pwm[i] = (int)value;
  }
  Py_DECREF(items);
  map_pwm(self, pwm, usable);
  PyObject *result = PyList_New(self->outputs);
  if (!result) return NULL;
  for (int i = 0; i < self->outputs; i++)
    PyList_SET_ITEM(result, i, PyFloat_FromDouble(self->value[i]));
  return result;
}

static PyMethodDef PwmMap_methods[] = {
    {"commands", (PyCFunction)PwmMap_commands, METH_O,
     "Every output's command for one frame's PWM (index 0 is SERVO1), holding PWM-0 outputs."},
    {NULL}};

static PyTypeObject PwmMapType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ardupilot_json_bridge.compiled._frame.PwmMap",
    .tp_basicsize = sizeof(PwmMap),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "PWM to commands: PwmMap(((channel, servo_min, servo_max, multiplier, offset, "
              "initial), ...)).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)PwmMap_init,
    .tp_methods = PwmMap_methods,
};

/* ---- A MuJoCo vehicle: commands in, physics stepped, sensors out ---------------------------- */

typedef struct {
  mj_step_fn step, step2, forward;
  mj_get_state_fn get_state;
} Mujoco;

typedef struct {
  PyObject_HEAD
  PyObject *keep; /* the model, the data and the arrays pointed into */
  Mujoco mj;
  void *model, *data;
  double *ctrl, *qpos, *qvel, *gyro, *accel, *commands, *speeds;
  int actuators, rotors;
  unsigned char rotor[MAX_ACTUATORS];
  double lower[MAX_ACTUATORS], upper[MAX_ACTUATORS];
  double thrust, time_constant, blend, blend_step;
} Vehicle;

static double *address(PyObject *value) {
  unsigned long long pointer = PyLong_AsUnsignedLongLong(value);
  if (pointer == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
  return (double *)(uintptr_t)pointer;
}

/*
 * Vehicle(keep, functions, pointers, rotors, lower, upper, thrust, time_constant):
 * functions the addresses of mj_step, mj_step2, mj_forward and mj_getState; pointers those of
 * the model, the data, and the vehicle's ctrl, qpos, qvel, gyro and accelerometer readings,
 * commands and rotor speeds (float64).
 */
static int Vehicle_init(Vehicle *self, PyObject *args, PyObject *kwargs) {
  PyObject *keep, *functions, *pointers, *rotors, *lower, *upper;
  if (!PyArg_ParseTuple(args, "OOOOOOdd", &keep, &functions, &pointers, &rotors, &lower, &upper,
                        &self->thrust, &self->time_constant))
    return -1;
  void *f[4], *p[9];
  if (!PyTuple_Check(functions) || PyTuple_GET_SIZE(functions) != 4 || !PyTuple_Check(pointers) ||
      PyTuple_GET_SIZE(pointers) != 9) {
    PyErr_SetString(PyExc_ValueError, "4 function and 9 data addresses");
    return -1;
  }
  for (int i = 0; i < 4; i++)
    if (!(f[i] = address(PyTuple_GET_ITEM(functions, i)))) return -1;
  for (int i = 0; i < 9; i++)
    if (!(p[i] = address(PyTuple_GET_ITEM(pointers, i)))) return -1;
  self->mj.step = (mj_step_fn)f[0];
  self->mj.step2 = (mj_step_fn)f[1];
  self->mj.forward = (mj_step_fn)f[2];
  self->mj.get_state = (mj_get_state_fn)f[3];
  self->model = p[0];
  self->data = p[1];
  self->ctrl = p[2];
  self->qpos = p[3];
  self->qvel = p[4];
  self->gyro = p[5];
  self->accel = p[6];
  self->commands = p[7];
  self->speeds = p[8];
  Py_ssize_t count = PySequence_Size(rotors);
  if (count < 1 || count > MAX_ACTUATORS || PySequence_Size(lower) != count ||
      PySequence_Size(upper) != count) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "1 to 64 actuators, each bounded");
    return -1;
  }
  self->actuators = (int)count;
  self->rotors = 0;
  for (Py_ssize_t i = 0; i < count; i++) {
    PyObject *item = PySequence_GetItem(rotors, i);
    self->rotor[i] = item && PyObject_IsTrue(item) == 1;
    self->rotors += self->rotor[i];
    Py_XDECREF(item);
    PyObject *low = PySequence_GetItem(lower, i), *high = PySequence_GetItem(upper, i);
    self->lower[i] = low ? PyFloat_AsDouble(low) : NAN;
    self->upper[i] = high ? PyFloat_AsDouble(high) : NAN;
    Py_XDECREF(low);
    Py_XDECREF(high);
    if (PyErr_Occurred()) return -1;
  }
  self->blend_step = -1.0;
  Py_XSETREF(self->keep, Py_NewRef(keep));
  return 0;
}

static void Vehicle_dealloc(Vehicle *self) {
  Py_XDECREF(self->keep);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Clamp finite commands into the actuators' bounds; 0 (nothing set) where one is not finite. */
static int set_commands(Vehicle *vehicle, const double *values, int count) {
  if (count > vehicle->actuators) count = vehicle->actuators;
  for (int i = 0; i < count; i++)
    if (!isfinite(values[i])) return 0;
  for (int i = 0; i < count; i++) {
    double value = values[i];
    value = value < vehicle->lower[i] ? vehicle->lower[i] : value;
    vehicle->commands[i] = value > vehicle->upper[i] ? vehicle->upper[i] : value;
  }
  return 1;
}

/* Before a frame's steps: the rotors' lag per step, or the servos' commands. */
static void prepare(Vehicle *vehicle, double step) {
  if (vehicle->rotors) {
    if (step != vehicle->blend_step) {
      vehicle->blend_step = step;
      vehicle->blend = 1.0 - exp(-step / vehicle->time_constant);
    }
  } else {
    memcpy(vehicle->ctrl, vehicle->commands, sizeof(double) * vehicle->actuators);
  }
}

/* Before each step: each rotor's speed follows its command (first-order lag), thrust k w^2. */
static void before_step(Vehicle *vehicle) {
  if (!vehicle->rotors) return;
  for (int i = 0; i < vehicle->actuators; i++) {
    if (vehicle->rotor[i]) {
      double speed = vehicle->speeds[i];
      speed += vehicle->blend * (vehicle->commands[i] - speed);
      vehicle->speeds[i] = speed;
      vehicle->ctrl[i] = vehicle->thrust * speed * speed;
    } else {
      vehicle->ctrl[i] = vehicle->commands[i];
    }
  }
}

static double physics_time(Vehicle *vehicle) {
  double time;
  vehicle->mj.get_state(vehicle->model, vehicle->data, &time, MJ_STATE_TIME);
  return time;
}

/*
 * Step the world count steps of step seconds, each vehicle applying its commands every step
 * (hooks[k], where not None, runs before each of vehicle k's steps: a force model MuJoCo does
 * not have). The first step is mj_step2 alone where split (mj_forward ran at this state).
 */
static int advance_vehicles(Vehicle **vehicles, int count, PyObject **hooks, long steps,
                            double step, int split) {
  Vehicle *first = vehicles[0];
  for (int k = 0; k < count; k++) prepare(vehicles[k], step);
  for (long index = 0; index < steps; index++) {
    for (int k = 0; k < count; k++) {
      if (hooks && hooks[k] != Py_None) {
        PyObject *result = PyObject_CallNoArgs(hooks[k]);
        if (!result) return 0;
        Py_DECREF(result);
      }
      before_step(vehicles[k]);
    }
    if (index == 0 && split)
      first->mj.step2(first->model, first->data);
    else
      first->mj.step(first->model, first->data);
  }
  return 1;
}

/* The vehicle now, in ROS conventions: time, position, orientation x-y-z-w, velocity, rates,
 * specific force. */
#define READING_VALUES 17

static void read_vehicle(Vehicle *vehicle, double *r) {
  const double *qpos = vehicle->qpos, *qvel = vehicle->qvel;
  r[0] = physics_time(vehicle);
  r[1] = qpos[0];
  r[2] = qpos[1];
  r[3] = qpos[2];
  r[4] = qpos[4];
  r[5] = qpos[5];
  r[6] = qpos[6];
  r[7] = qpos[3];
  for (int i = 0; i < 3; i++) {
    r[8 + i] = qvel[i];
    r[11 + i] = vehicle->gyro[i];
    r[14 + i] = vehicle->accel[i];
  }
}

/*
 * Untrack a tuple of numbers (or of such tuples) from the cyclic garbage collector: it cannot
 * be part of a cycle. CPython's collector untracks such a tuple itself, but only when a pass
 * reaches it; the bookkeeping makes some 40 a frame, and until then every pass walked them.
 */
static PyObject *numbers_only(PyObject *tuple) {
  if (tuple) PyObject_GC_UnTrack(tuple);
  return tuple;
}

/* A tuple of n floats, or NULL with the error set. */
static PyObject *floats(const double *values, int n) {
  PyObject *tuple = PyTuple_New(n);
  if (!tuple) return NULL;
  for (int i = 0; i < n; i++) {
    PyObject *value = PyFloat_FromDouble(values[i]);
    if (!value) {
      Py_DECREF(tuple);
      return NULL;
    }
    PyTuple_SET_ITEM(tuple, i, value);
  }
  return numbers_only(tuple);
}

static int made(Vehicle *self) {
  if (self->model) return 1;
  PyErr_SetString(PyExc_RuntimeError, "the compiled vehicle was not made");
  return 0;
}

static PyObject *Vehicle_set_commands(Vehicle *self, PyObject *arg) {
  if (!made(self)) return NULL;
  PyObject *items = PySequence_Fast(arg, "commands are a sequence of numbers");
  if (!items) return NULL;
  int count = (int)PySequence_Fast_GET_SIZE(items);
  if (count > self->actuators) count = self->actuators;
  double values[MAX_ACTUATORS];
  for (int i = 0; i < count; i++) {
    values[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(items, i));
    if (values[i] == -1.0 && PyErr_Occurred()) {
      Py_DECREF(items);
      return NULL;
    }
  }
  Py_DECREF(items);
  return PyBool_FromLong(set_commands(self, values, count));
}

static PyObject *Vehicle_read(Vehicle *self, PyObject *unused) {
  if (!made(self)) return NULL;
  double reading[READING_VALUES];
  read_vehicle(self, reading);
  return floats(reading, READING_VALUES);
}

static PyObject *Vehicle_forward(Vehicle *self, PyObject *unused) {
  if (!made(self)) return NULL;
  self->mj.forward(self->model, self->data);
  Py_RETURN_NONE;
}

static PyMethodDef Vehicle_methods[] = {
    {"set_commands", (PyCFunction)Vehicle_set_commands, METH_O,
     "Clamp the commands into the actuators' bounds; False (nothing set) where one is not "
     "finite."},
    {"read", (PyCFunction)Vehicle_read, METH_NOARGS,
     "The vehicle now in ROS conventions: time, position, orientation x-y-z-w, velocity, body "
     "rates, specific force."},
    {"forward", (PyCFunction)Vehicle_forward, METH_NOARGS, "mj_forward at the current state."},
    {NULL}};

static PyTypeObject VehicleType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ardupilot_json_bridge.compiled._frame.Vehicle",
    .tp_basicsize = sizeof(Vehicle),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A MuJoCo vehicle's actuators and sensors, for stepping and reading in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Vehicle_init,
    .tp_dealloc = (destructor)Vehicle_dealloc,
    .tp_methods = Vehicle_methods,
};

/* advance(vehicles, hooks, steps, step, split): see advance_vehicles. */
static PyObject *py_advance(PyObject *module, PyObject *args) {
  PyObject *vehicles, *hooks;
  long steps;
  double step;
  int split;
  if (!PyArg_ParseTuple(args, "O!O!ldp", &PyTuple_Type, &vehicles, &PyTuple_Type, &hooks, &steps,
                        &step, &split))
    return NULL;
  Py_ssize_t count = PyTuple_GET_SIZE(vehicles);
  if (count < 1 || count > 1024 || PyTuple_GET_SIZE(hooks) != count) {
    PyErr_SetString(PyExc_ValueError, "1 to 1024 vehicles, a hook (or None) for each");
    return NULL;
  }
  Vehicle *each[1024];
  int hooked = 0;
  for (Py_ssize_t k = 0; k < count; k++) {
    PyObject *item = PyTuple_GET_ITEM(vehicles, k);
    if (!PyObject_TypeCheck(item, &VehicleType)) {
      PyErr_SetString(PyExc_TypeError, "vehicles are compiled Vehicles");
      return NULL;
    }
    each[k] = (Vehicle *)item;
    if (!made(each[k])) return NULL;
    hooked |= PyTuple_GET_ITEM(hooks, k) != Py_None;
  }
  int ok;
  if (hooked) {
    ok = advance_vehicles(each, (int)count, ((PyTupleObject *)hooks)->ob_item, steps, step, split);
  } else {
    Py_BEGIN_ALLOW_THREADS ok = advance_vehicles(each, (int)count, NULL, steps, step, split);
    Py_END_ALLOW_THREADS
  }
  if (!ok) return NULL;
  Py_RETURN_NONE;
}

/* ---- The frame loop ------------------------------------------------------------------------ */

#define MAX_VEHICLES 64 /* settings.MAX_FLEET */
/* A batch not full is handed to the bookkeeping once its first frame is this old (s). */
#define BATCH_AGE 0.002

/* One frame served by the loop, for the link's bookkeeping. */
typedef struct {
  int vehicle;
  uint32_t count;
  int channels;
  int answered, send_error;
  double received, sent, timestamp;
  double reading[READING_VALUES];
  double commands[MAX_ACTUATORS];
  uint16_t pwm[MAX_CHANNELS];
  int reply_size;
  char reply[REPLY_CAPACITY];
} Served;

/* One vehicle's SITL: its socket, its session as the link left it, and its datagram in hand. */
typedef struct {
  int fd;
  Vehicle *vehicle;
  PwmMap *map;
  struct sockaddr_storage peer;
  socklen_t peer_size;
  int channels;
  unsigned rate;
  uint32_t last_frame;
  double origin, last_stamp;
  int arrived;
  Servo servo;
  double received;
  uint8_t *datagram;
  Py_ssize_t size;
  struct sockaddr_storage sender;
  socklen_t sender_size;
} Seat;

/*
 * Two batches: the loop fills one while the link's bookkeeping takes the other (take, done),
 * so no reply waits for the interpreter. A full batch waits for the other to be taken.
 */
typedef struct {
  PyObject_HEAD
  PyObject *vehicles, *maps, *on_diverged;
  int count;
  Seat seat[MAX_VEHICLES];
  int waker;
  double hold_timeout, released;
  long steps;
  double step;
  int split;
  int no_time_sync, no_lockstep;
  int order[MAX_VEHICLES], consumed;
  int failed_seat, receive_error;
  int capacity;
  Served *batch[2];
  int filled[2];
  int filling, pending, closed;
  double batch_started;
  int hurried; /* hurry() asked: the batch goes now, however young */
  int idle;    /* take() waits with no frame to age: the first frame wakes it */
  unsigned long long served, world_steps;
  pthread_mutex_t lock;
  pthread_cond_t changed;
  int ready;
} FrameLoop;

static double monotonic(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec + now.tv_nsec * 1e-9;
}

/*
 * FrameLoop(fds, vehicles, waker, hold_timeout, on_diverged, capacity, no_time_sync,
 * no_lockstep): vehicle k's SITL on socket fds[k]; a fleet's world waits hold_timeout s for
 * its frames, and wakes when waker (a socket, or -1) can be read.
 */
static int FrameLoop_init(FrameLoop *self, PyObject *args, PyObject *kwargs) {
  PyObject *fds, *vehicles, *on_diverged;
  int capacity;
  if (self->ready) {
    PyErr_SetString(PyExc_RuntimeError, "a frame loop is made once");
    return -1;
  }
  if (!PyArg_ParseTuple(args, "O!O!idOipp", &PyTuple_Type, &fds, &PyTuple_Type, &vehicles,
                        &self->waker, &self->hold_timeout, &on_diverged, &capacity,
                        &self->no_time_sync, &self->no_lockstep))
    return -1;
  Py_ssize_t count = PyTuple_GET_SIZE(vehicles);
  if (count < 1 || count > MAX_VEHICLES || PyTuple_GET_SIZE(fds) != count) {
    PyErr_Format(PyExc_ValueError, "1 to %d vehicles, a socket each", MAX_VEHICLES);
    return -1;
  }
  if (capacity < 1 || capacity > 4096) {
    PyErr_SetString(PyExc_ValueError, "a batch holds 1 to 4096 frames");
    return -1;
  }
  for (Py_ssize_t k = 0; k < count; k++) {
    PyObject *vehicle = PyTuple_GET_ITEM(vehicles, k);
    if (!PyObject_TypeCheck(vehicle, &VehicleType)) {
      PyErr_SetString(PyExc_TypeError, "vehicles are compiled Vehicles");
      return -1;
    }
    if (!made((Vehicle *)vehicle)) return -1;
    self->seat[k].vehicle = (Vehicle *)vehicle;
    self->seat[k].fd = (int)PyLong_AsLong(PyTuple_GET_ITEM(fds, k));
    if (PyErr_Occurred()) return -1;
    self->seat[k].datagram = PyMem_Malloc(MAX_DATAGRAM);
    if (!self->seat[k].datagram) {
      PyErr_NoMemory();
      return -1;
    }
  }
  for (int i = 0; i < 2; i++) {
    self->batch[i] = PyMem_Calloc(capacity, sizeof(Served));
    if (!self->batch[i]) {
      PyErr_NoMemory();
      return -1;
    }
  }
  self->count = (int)count;
  self->capacity = capacity;
  self->pending = -1;
  pthread_condattr_t monotonic_clock; /* take()'s timed wait counts in monotonic() time */
  pthread_condattr_init(&monotonic_clock);
  int clock_error = pthread_condattr_setclock(&monotonic_clock, CLOCK_MONOTONIC);
  if (!clock_error) clock_error = pthread_cond_init(&self->changed, &monotonic_clock);
  pthread_condattr_destroy(&monotonic_clock);
  if (clock_error) {
    errno = clock_error;
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
  }
  pthread_mutex_init(&self->lock, NULL);
  self->ready = 1;
  Py_XSETREF(self->vehicles, Py_NewRef(vehicles));
  Py_XSETREF(self->on_diverged, Py_NewRef(on_diverged));
  return 0;
}

static void FrameLoop_dealloc(FrameLoop *self) {
  Py_XDECREF(self->vehicles);
  Py_XDECREF(self->maps);
  Py_XDECREF(self->on_diverged);
  for (int k = 0; k < MAX_VEHICLES; k++) PyMem_Free(self->seat[k].datagram);
  PyMem_Free(self->batch[0]);
  PyMem_Free(self->batch[1]);
  if (self->ready) {
    pthread_mutex_destroy(&self->lock);
    pthread_cond_destroy(&self->changed);
  }
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int same_address(const struct sockaddr_storage *a, socklen_t a_size,
                        const struct sockaddr_storage *b, socklen_t b_size) {
  if (a->ss_family != b->ss_family) return 0;
  if (a->ss_family == AF_INET) {
    const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
    return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
  }
  if (a->ss_family == AF_INET6) {
    const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
    return x->sin6_port == y->sin6_port &&
           !memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr));
  }
  return a_size == b_size && !memcmp(a, b, a_size);
}

static int set_peer(Seat *seat, const char *host, int port) {
  memset(&seat->peer, 0, sizeof(seat->peer));
  struct sockaddr_in *v4 = (struct sockaddr_in *)&seat->peer;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&seat->peer;
  if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons((uint16_t)port);
    seat->peer_size = sizeof(*v4);
  } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons((uint16_t)port);
    seat->peer_size = sizeof(*v6);
  } else {
    PyErr_Format(PyExc_ValueError, "not a numeric IP address: %s", host);
    return 0;
  }
  return 1;
}

/*
 * resume(maps, sessions, steps, step, split, released): where each vehicle's session stands,
 * as the Python links left them (every batch taken): maps[k] is vehicle k's PwmMap, sessions[k]
 * (peer_host, peer_port, last_frame, channels, rate, origin, last_stamp); every frame is steps
 * steps of step s, the first split (mj_forward ran); the world last answered at released.
 */
static PyObject *FrameLoop_resume(FrameLoop *self, PyObject *args) {
  PyObject *maps, *sessions;
  int split;
  if (!self->ready) {
    PyErr_SetString(PyExc_RuntimeError, "the frame loop was not made");
    return NULL;
  }
  if (!PyArg_ParseTuple(args, "O!O!ldpd", &PyTuple_Type, &maps, &PyTuple_Type, &sessions,
                        &self->steps, &self->step, &split, &self->released))
    return NULL;
  if (PyTuple_GET_SIZE(maps) != self->count || PyTuple_GET_SIZE(sessions) != self->count) {
    PyErr_SetString(PyExc_ValueError, "a PWM map and a session for each vehicle");
    return NULL;
  }
  if (self->steps < 1 || !(self->step > 0.0)) {
    PyErr_SetString(PyExc_ValueError, "a frame is one or more steps of a positive length");
    return NULL;
  }
  for (int k = 0; k < self->count; k++) {
    Seat *seat = &self->seat[k];
    PyObject *map = PyTuple_GET_ITEM(maps, k);
    if (!PyObject_TypeCheck(map, &PwmMapType) ||
        ((PwmMap *)map)->outputs != seat->vehicle->actuators) {
      PyErr_SetString(PyExc_ValueError, "each PWM map's outputs are its vehicle's actuators");
      return NULL;
    }
    const char *host;
    int port;
    unsigned long last_frame;
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(sessions, k), "sikiIdd", &host, &port, &last_frame,
                          &seat->channels, &seat->rate, &seat->origin, &seat->last_stamp) ||
        !set_peer(seat, host, port))
      return NULL;
    seat->map = (PwmMap *)map;
    seat->last_frame = (uint32_t)last_frame;
  }
  Py_XSETREF(self->maps, Py_NewRef(maps));
  self->split = split;
  Py_RETURN_NONE;
}

/*
 * Hand the batch being filled to the bookkeeping once the other is taken (the lock held). The
 * loop waiting here for a full one is done once the other thread handed it over (next_batch):
 * the batch it fills then is the empty one.
 */
static void hand_over(FrameLoop *self) {
  while (self->pending >= 0 && !self->closed && self->filled[self->filling])
    pthread_cond_wait(&self->changed, &self->lock);
  if (!self->filled[self->filling]) return;
  if (self->closed) {
    self->filled[self->filling] = 0; /* no one takes it any more */
    return;
  }
  self->pending = self->filling;
  self->filling ^= 1;
  self->filled[self->filling] = 0;
  pthread_cond_broadcast(&self->changed);
}

enum Outcome { HANDED_BACK, RECEIVE_FAILED, UNANSWERED, WAITED };

/* Read seat k's next datagram; whether it is the plain next frame of its session. */
static int take_datagram(FrameLoop *self, int k) {
  Seat *seat = &self->seat[k];
  seat->sender_size = sizeof(seat->sender);
  ssize_t size;
  do {
    seat->sender_size = sizeof(seat->sender);
    size = recvfrom(seat->fd, seat->datagram, MAX_DATAGRAM, 0, (struct sockaddr *)&seat->sender,
                    &seat->sender_size);
  } while (size < 0 && errno == EINTR);
  if (size < 0) {
    self->failed_seat = k;
    self->receive_error = errno;
    return -1;
  }
  seat->received = monotonic();
  seat->size = size;
  self->order[self->consumed++] = k;
  Servo *servo = &seat->servo;
  return same_address(&seat->sender, seat->sender_size, &seat->peer, seat->peer_size) &&
         decode_servo(seat->datagram, size, servo) && servo->channels == seat->channels &&
         servo->rate == seat->rate && seat->last_frame != UINT32_MAX &&
         servo->count == seat->last_frame + 1;
}

/* Milliseconds until due for poll() (rounded up), or -1 where nothing is due. */
static int milliseconds_to(double due) {
  if (due <= 0.0) return -1; /* nothing due */
  double left = ceil((due - monotonic()) * 1000.0);
  return left <= 0.0 ? 0 : left >= INT_MAX ? INT_MAX : (int)left;
}

/*
 * Read one datagram from every vehicle's SITL: HANDED_BACK where one is no plain frame,
 * WAITED where the world's hold ran out (once a frame is in, as FleetWorld holds) or the waker
 * woke, RECEIVE_FAILED where a socket failed (or cannot be polled: failed_seat, errno 0), -1
 * when all are in.
 */
static int gather(FrameLoop *self) {
  int count = self->count, waiting = count;
  self->consumed = 0;
  for (int k = 0; k < count; k++) self->seat[k].arrived = 0;
  struct pollfd fds[MAX_VEHICLES + 1];
  int seats[MAX_VEHICLES + 1];
  if (count == 1 && self->waker < 0) {
    int plain = take_datagram(self, 0); /* a lone vehicle: block on its socket */
    return plain < 0 ? RECEIVE_FAILED : plain ? -1 : HANDED_BACK;
  }
  while (waiting) {
    int n = 0;
    for (int k = 0; k < count; k++) {
      if (self->seat[k].arrived) continue;
      fds[n].fd = self->seat[k].fd;
      fds[n].events = POLLIN;
      seats[n++] = k;
    }
    if (self->waker >= 0) {
      fds[n].fd = self->waker;
      fds[n].events = POLLIN;
      seats[n++] = -1;
    }
    double hold_due = waiting < count ? self->released + self->hold_timeout : -1.0;
    int ready = poll(fds, n, milliseconds_to(hold_due));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      self->failed_seat = -1;
      self->receive_error = errno;
      return RECEIVE_FAILED;
    }
    if (ready == 0) {
      if (hold_due > 0.0 && monotonic() >= hold_due) return WAITED;
      continue;
    }
    for (int i = 0; i < n; i++) {
      if (!fds[i].revents) continue;
      if (seats[i] == -1) return WAITED;
      if (fds[i].revents & POLLNVAL || (count > 1 && fds[i].revents & (POLLERR | POLLHUP))) {
        /* Closed under the loop, or (a fleet's) in error: the Python server judges it. A lone
         * vehicle's error (SITL's port closed) is read below, as the Python link reads it. */
        self->failed_seat = seats[i];
        self->receive_error = 0;
        return RECEIVE_FAILED;
      }
      int plain = take_datagram(self, seats[i]);
      if (plain < 0) return RECEIVE_FAILED;
      if (!plain) return HANDED_BACK;
      self->seat[seats[i]].arrived = 1;
      waiting--;
    }
  }
  return -1;
}

/* Record vehicle k's frame, just stepped, and send its reply; whether it had one. */
static int answer(FrameLoop *self, int k) {
  Seat *seat = &self->seat[k];
  Vehicle *vehicle = seat->vehicle;
  Served served, *frame = &served;
  frame->vehicle = k;
  frame->count = seat->servo.count;
  frame->channels = seat->servo.channels;
  memcpy(frame->pwm, seat->servo.pwm, sizeof(uint16_t) * seat->servo.channels);
  memcpy(frame->commands, seat->map->value, sizeof(double) * seat->map->outputs);
  read_vehicle(vehicle, frame->reading);
  frame->received = seat->received;
  frame->timestamp = frame->sent = NAN;
  frame->answered = frame->send_error = 0;
  frame->reply_size = 0;
  seat->last_frame = seat->servo.count;
  /* The reply: NED/FRD, at the session's time; a frame that cannot have one gets none. */
  const double *r = frame->reading;
  double v[MANDATORY_VALUES];
  double stamp = r[0];
  int length = -1;
  if (stamp > seat->last_stamp) {
    v[0] = frame->timestamp = stamp - seat->origin;
    flu_to_frd(r + 11, v + 1);
    flu_to_frd(r + 14, v + 4);
    enu_to_ned(r + 1, v + 7);
    enu_to_ned(r + 8, v + 14);
    if (ros_to_ned_frd(r[4], r[5], r[6], r[7], v + 10))
      length = format_mandatory(frame->reply, sizeof(frame->reply) - SUFFIX_ROOM, v);
  }
  if (length >= 0) {
    char *end = frame->reply + length;
    if (self->no_time_sync) end = APPEND(end, ",\"no_time_sync\":1");
    if (self->no_lockstep) end = APPEND(end, ",\"no_lockstep\":1");
    end = APPEND(end, "}\n");
    length = (int)(end - frame->reply);
    frame->reply_size = length;
    frame->answered = 1;
    seat->last_stamp = stamp;
    ssize_t sent;
    do {
      sent = sendto(seat->fd, frame->reply, length, 0, (struct sockaddr *)&seat->peer,
                    seat->peer_size);
    } while (sent < 0 && errno == EINTR);
    if (sent < 0) frame->send_error = errno;
    frame->sent = monotonic(); /* the latency counts the send, as the Python link's does */
  }
  /* Into the batch being filled, which take() may hand over once old enough (the lock held). */
  pthread_mutex_lock(&self->lock);
  int filled = self->filled[self->filling];
  memcpy(&self->batch[self->filling][filled], frame,
         offsetof(Served, reply) + (size_t)frame->reply_size);
  if (!filled) {
    self->batch_started = frame->received;
    if (self->idle) pthread_cond_broadcast(&self->changed); /* take() starts aging it */
  }
  self->served++;
  if (++self->filled[self->filling] == self->capacity) hand_over(self);
  pthread_mutex_unlock(&self->lock);
  return frame->answered;
}

/*
 * Serve plain next frames until a datagram needs the Python links, without the GIL but for
 * MuJoCo's divergence (rare): every SITL's frame in, the world stepped once for all, each
 * reply out before the next datagrams are read.
 */
static enum Outcome serve_frames(FrameLoop *self) {
  Vehicle *vehicles[MAX_VEHICLES];
  for (int k = 0; k < self->count; k++) vehicles[k] = self->seat[k].vehicle;
  Vehicle *first = vehicles[0];
  for (;;) {
    int gathered = gather(self);
    if (gathered >= 0) return (enum Outcome)gathered;
    for (int k = 0; k < self->count; k++) {
      Seat *seat = &self->seat[k];
      int pwm[MAX_CHANNELS];
      for (int i = 0; i < seat->servo.channels; i++) pwm[i] = seat->servo.pwm[i];
      map_pwm(seat->map, pwm, seat->servo.channels);
      if (!set_commands(seat->vehicle, seat->map->value, seat->map->outputs)) return HANDED_BACK;
    }
    double end = physics_time(first) + self->steps * self->step;
    advance_vehicles(vehicles, self->count, NULL, self->steps, self->step, self->split);
    if (physics_time(first) < end - 0.5 * self->step) {
      PyGILState_STATE gil = PyGILState_Ensure();
      PyObject *result = PyObject_CallFunction(self->on_diverged, "d", end);
      Py_XDECREF(result);
      PyErr_Clear(); /* the hook says what happened; the frame goes on as MuJoCo left it */
      PyGILState_Release(gil);
    }
    first->mj.forward(first->model, first->data);
    self->split = 1;
    self->consumed = 0;
    pthread_mutex_lock(&self->lock);
    self->world_steps++;
    pthread_mutex_unlock(&self->lock);
    int answered = 1;
    for (int k = 0; k < self->count; k++) answered &= answer(self, k);
    self->released = monotonic();
    if (!answered) return UNANSWERED; /* the links say why; the SITLs resend */
  }
}

/*
 * serve() -> (outcome, handed, error): serve until a datagram needs the Python links
 * (outcome 0), receiving failed (1: error is (vehicle or -1, errno)), a frame stepped could
 * not be answered (2: the bookkeeping says why) or the world's hold ran out or the waker woke
 * (3). handed holds the datagrams read and not served, (vehicle, datagram, (host, port),
 * arrival) in the order they came; errno 0: the vehicle's socket cannot be polled. Every
 * frame served is bookkept (take, done) before serve returns.
 */
static PyObject *FrameLoop_serve(FrameLoop *self, PyObject *unused) {
  enum Outcome outcome;
  if (!self->maps) {
    PyErr_SetString(PyExc_RuntimeError, "resume() tells the frame loop where the sessions stand");
    return NULL;
  }
  Py_BEGIN_ALLOW_THREADS outcome = serve_frames(self);
  pthread_mutex_lock(&self->lock);
  if (self->filled[self->filling]) hand_over(self);
  while (self->pending >= 0 && !self->closed) pthread_cond_wait(&self->changed, &self->lock);
  pthread_mutex_unlock(&self->lock);
  Py_END_ALLOW_THREADS
  PyObject *handed = PyTuple_New(self->consumed);
  if (!handed) return NULL;
  for (int i = 0; i < self->consumed; i++) {
    Seat *seat = &self->seat[self->order[i]];
    char host[INET6_ADDRSTRLEN] = "";
    int port = 0;
    if (seat->sender.ss_family == AF_INET) {
      struct sockaddr_in *v4 = (struct sockaddr_in *)&seat->sender;
      inet_ntop(AF_INET, &v4->sin_addr, host, sizeof(host));
      port = ntohs(v4->sin_port);
    } else if (seat->sender.ss_family == AF_INET6) {
      struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&seat->sender;
      inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof(host));
      port = ntohs(v6->sin6_port);
    }
    PyObject *item = Py_BuildValue("(iy#(si)d)", self->order[i], seat->datagram, seat->size,
                                   host, port, seat->received);
    if (!item) {
      Py_DECREF(handed);
      return NULL;
    }
    PyTuple_SET_ITEM(handed, i, item);
  }
  self->consumed = 0;
  if (outcome == RECEIVE_FAILED)
    return Py_BuildValue("(iN(ii))", outcome, handed, self->failed_seat, self->receive_error);
  return Py_BuildValue("(iNO)", outcome, handed, Py_None);
}

static PyObject *channels_tuple(const Served *frame) {
  PyObject *tuple = PyTuple_New(frame->channels);
  if (!tuple) return NULL;
  for (int i = 0; i < frame->channels; i++) {
    PyObject *value = PyLong_FromLong(frame->pwm[i]);
    if (!value) {
      Py_DECREF(tuple);
      return NULL;
    }
    PyTuple_SET_ITEM(tuple, i, value);
  }
  return numbers_only(tuple);
}

/* What the live checks take of a frame (ConventionChecker.add_frame's arguments, ROS's). */
static PyObject *check_tuple(const Served *frame, PyObject *pwm) {
  const double *r = frame->reading;
  double linear[3];
  world_to_body(r + 4, r + 8, linear);
  return numbers_only(Py_BuildValue("(dNNNNNO)", r[0], floats(r + 11, 3), floats(r + 14, 3),
                                    floats(r + 1, 3), floats(r + 4, 4), floats(linear, 3), pwm));
}

/*
 * One vehicle's frames of a batch, as sources/compiled_frames.py VehicleBatch reads them:
 * (index, frames, last_count, last_received, last_pwm, last_commands, answered,
 * answered_count, answered_reading, reply, timestamp, previous_timestamp, replied_at,
 * latencies, send_errors, unanswered, checks). The frames answered are counted and their newest
 * given whole; each one not answered is given (count, reading, timestamp): it comes after them,
 * since a frame not answered ends serve_frames. checks holds every frame where asked for, else
 * None.
 */
static PyObject *vehicle_batch(const FrameLoop *self, int vehicle, const Served *frames, int n,
                               int checks) {
  int total = 0, answered = 0, failed = 0, last = -1, newest = -1, previous = -1;
  for (int j = 0; j < n; j++) {
    if (frames[j].vehicle != vehicle) continue;
    total++;
    last = j;
    if (!frames[j].answered) continue;
    answered++;
    failed += frames[j].send_error != 0;
    previous = newest;
    newest = j;
  }
  int actuators = self->seat[vehicle].vehicle->actuators;
  PyObject *latencies = PyTuple_New(answered - failed), *errors = PyTuple_New(failed);
  PyObject *unanswered = PyTuple_New(total - answered);
  PyObject *check_list = checks ? PyTuple_New(total) : Py_NewRef(Py_None);
  if (!latencies || !errors || !unanswered || !check_list) goto done;
  int in_latencies = 0, in_errors = 0, in_unanswered = 0, in_checks = 0;
  for (int j = 0; j < n; j++) {
    const Served *frame = &frames[j];
    if (frame->vehicle != vehicle) continue;
    PyObject *item;
    if (frame->answered && frame->send_error) {
      item = PyLong_FromLong(frame->send_error);
      if (!item) goto done;
      PyTuple_SET_ITEM(errors, in_errors++, item);
    } else if (frame->answered) {
      item = PyFloat_FromDouble(frame->sent - frame->received);
      if (!item) goto done;
      PyTuple_SET_ITEM(latencies, in_latencies++, item);
    } else {
      item = Py_BuildValue("(kNd)", (unsigned long)frame->count,
                           floats(frame->reading, READING_VALUES), frame->timestamp);
      if (!item) goto done;
      PyTuple_SET_ITEM(unanswered, in_unanswered++, item);
    }
    if (!checks) continue;
    PyObject *pwm = channels_tuple(frame);
    PyObject *check = pwm ? check_tuple(frame, pwm) : NULL;
    Py_XDECREF(pwm);
    if (!check) goto done;
    PyTuple_SET_ITEM(check_list, in_checks++, check);
  }
  const Served *final = &frames[last];
  const Served *reply = newest >= 0 ? &frames[newest] : NULL;
  return Py_BuildValue(
      "(iikdNNilNNdddNNNN)", vehicle, total, (unsigned long)final->count, final->received,
      channels_tuple(final), floats(final->commands, actuators), answered,
      reply ? (long)reply->count : -1L,
      reply ? floats(reply->reading, READING_VALUES) : Py_NewRef(Py_None),
      reply ? PyBytes_FromStringAndSize(reply->reply, reply->reply_size) : Py_NewRef(Py_None),
      reply ? reply->timestamp : NAN, previous >= 0 ? frames[previous].timestamp : NAN,
      reply ? reply->sent : NAN, latencies, errors, unanswered, check_list);
done:
  Py_XDECREF(latencies);
  Py_XDECREF(errors);
  Py_XDECREF(unanswered);
  Py_XDECREF(check_list);
  return NULL;
}

/* Every frame of a batch as the recording takes it, in the order served: (vehicle, reading,
 * pwm, commands). */
static PyObject *batch_records(const FrameLoop *self, const Served *frames, int n) {
  PyObject *records = PyTuple_New(n);
  if (!records) return NULL;
  for (int j = 0; j < n; j++) {
    const Served *frame = &frames[j];
    int actuators = self->seat[frame->vehicle].vehicle->actuators;
    PyObject *record = Py_BuildValue("(iNNN)", frame->vehicle,
                                     floats(frame->reading, READING_VALUES),
                                     channels_tuple(frame), floats(frame->commands, actuators));
    if (!record) {
      Py_DECREF(records);
      return NULL;
    }
    PyTuple_SET_ITEM(records, j, record);
  }
  return records;
}

/*
 * Wait for the next batch to bookkeep (the lock held): a full one the loop handed over, or the
 * one being filled once its first frame is BATCH_AGE old (or hurry() asked), handed over here
 * so the loop never waits on a clock. Its index, or -1 once closed.
 */
static int next_batch(FrameLoop *self) {
  while (self->pending < 0 && !self->closed) {
    if (!self->filled[self->filling]) {
      self->hurried = 0;
      self->idle = 1;
      pthread_cond_wait(&self->changed, &self->lock);
      self->idle = 0;
      continue;
    }
    double due = self->batch_started + BATCH_AGE;
    if (self->hurried || monotonic() >= due) {
      self->hurried = 0;
      hand_over(self);
      break;
    }
    struct timespec until;
    until.tv_sec = (time_t)due;
    until.tv_nsec = (long)((due - (double)until.tv_sec) * 1e9);
    pthread_cond_timedwait(&self->changed, &self->lock, &until);
  }
  return self->pending;
}

/*
 * take(checks, records) -> (each vehicle's frames of the next batch served (vehicle_batch), in
 * the vehicles' order; where records, every frame as the recording takes it, in the order
 * served (batch_records), else None), once there is a batch; None once closed. done() after
 * its bookkeeping frees it for the loop.
 */
static PyObject *FrameLoop_take(FrameLoop *self, PyObject *args) {
  int checks, records;
  if (!PyArg_ParseTuple(args, "pp", &checks, &records)) return NULL;
  if (!self->ready) {
    PyErr_SetString(PyExc_RuntimeError, "the frame loop was not made");
    return NULL;
  }
  int index;
  Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&self->lock);
  index = next_batch(self);
  pthread_mutex_unlock(&self->lock);
  Py_END_ALLOW_THREADS
  if (index < 0) Py_RETURN_NONE;
  int n = self->filled[index];
  const Served *frames = self->batch[index];
  int present[MAX_VEHICLES] = {0}, groups = 0;
  for (int j = 0; j < n; j++) groups += !present[frames[j].vehicle]++;
  PyObject *batch = PyTuple_New(groups);
  if (!batch) return NULL;
  for (int k = 0, g = 0; k < self->count; k++) {
    if (!present[k]) continue;
    PyObject *group = vehicle_batch(self, k, frames, n, checks);
    if (!group) {
      Py_DECREF(batch);
      return NULL;
    }
    PyTuple_SET_ITEM(batch, g++, group);
  }
  return Py_BuildValue("(NN)", batch,
                       records ? batch_records(self, frames, n) : Py_NewRef(Py_None));
}

static PyObject *FrameLoop_done(FrameLoop *self, PyObject *unused) {
  if (self->ready) {
    pthread_mutex_lock(&self->lock);
    if (self->pending >= 0) self->filled[self->pending] = 0;
    self->pending = -1;
    pthread_cond_broadcast(&self->changed); /* the loop may wait to hand a full batch over */
    pthread_mutex_unlock(&self->lock);
  }
  Py_RETURN_NONE;
}

static PyObject *FrameLoop_hurry(FrameLoop *self, PyObject *unused) {
  if (!self->ready) Py_RETURN_NONE;
  pthread_mutex_lock(&self->lock);
  self->hurried = 1;
  pthread_cond_broadcast(&self->changed);
  pthread_mutex_unlock(&self->lock);
  Py_RETURN_NONE;
}

static PyObject *FrameLoop_served(FrameLoop *self, PyObject *unused) {
  unsigned long long served = 0, steps = 0;
  if (self->ready) {
    pthread_mutex_lock(&self->lock);
    served = self->served;
    steps = self->world_steps;
    pthread_mutex_unlock(&self->lock);
  }
  return Py_BuildValue("(KK)", served, steps);
}

static PyObject *FrameLoop_close(FrameLoop *self, PyObject *unused) {
  if (self->ready) {
    pthread_mutex_lock(&self->lock);
    self->closed = 1;
    pthread_cond_broadcast(&self->changed);
    pthread_mutex_unlock(&self->lock);
  }
  Py_RETURN_NONE;
}

static PyMethodDef FrameLoop_methods[] = {
    {"resume", (PyCFunction)FrameLoop_resume, METH_VARARGS,
     "Where each vehicle's session stands, as the Python links left them."},
    {"serve", (PyCFunction)FrameLoop_serve, METH_NOARGS,
     "Serve plain next frames until a datagram needs the Python links."},
    {"take", (PyCFunction)FrameLoop_take, METH_VARARGS,
     "take(checks, records): each vehicle's frames of the next batch served (None once "
     "closed)."},
    {"done", (PyCFunction)FrameLoop_done, METH_NOARGS,
     "The batch taken is bookkept: the loop may fill it again."},
    {"hurry", (PyCFunction)FrameLoop_hurry, METH_NOARGS,
     "Have a batch not full go to the bookkeeping now, not when 2 ms old."},
    {"served", (PyCFunction)FrameLoop_served, METH_NOARGS,
     "(frames, world steps) served since the loop was made, every vehicle's frames."},
    {"close", (PyCFunction)FrameLoop_close, METH_NOARGS,
     "Wake take() with None, and serve() from waiting for the bookkeeping."},
    {NULL}};

static PyTypeObject FrameLoopType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ardupilot_json_bridge.compiled._frame.FrameLoop",
    .tp_basicsize = sizeof(FrameLoop),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "FrameLoop(fds, vehicles, waker, hold_timeout, on_diverged, capacity, "
              "no_time_sync, no_lockstep): lock-step frames served in C, bookkept in batches.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FrameLoop_init,
    .tp_dealloc = (destructor)FrameLoop_dealloc,
    .tp_methods = FrameLoop_methods,
};

/* ---- The module ----------------------------------------------------------------------------- */

static PyMethodDef module_methods[] = {
    {"decode_servo", py_decode_servo, METH_O,
     "(frame_rate, frame_count, pwm) of a 16- or 32-channel servo packet, or None."},
    {"format_mandatory", py_format_mandatory, METH_VARARGS,
     "The reply's mandatory part from its 17 values, or None where one cannot be sent."},
    {"scale_pwm", py_scale_pwm, METH_VARARGS,
     "scale_pwm(pwm, servo_min, servo_max, multiplier, offset): one output's command."},
    {"canonical", py_canonical, METH_VARARGS,
     "The unit quaternion w, x, y, z with w >= 0, or None where it is no rotation."},
    {"enu_to_ned", py_enu_to_ned, METH_O, "ENU world vector to NED: (x, y, z) -> (y, x, -z)."},
    {"flu_to_frd", py_flu_to_frd, METH_O, "FLU body vector to FRD: (x, y, z) -> (x, -y, -z)."},
    {"ros_to_ned_frd", py_ros_to_ned_frd, METH_VARARGS,
     "ROS orientation x, y, z, w to ArduPilot's w-first FRD-in-NED (w >= 0), or None."},
    {"world_to_body", py_world_to_body, METH_VARARGS,
     "world_to_body((x, y, z, w), v): world vector v in the body of ROS orientation x, y, z, w."},
    {"advance", py_advance, METH_VARARGS,
     "advance(vehicles, hooks, steps, step, split): step the world the vehicles share."},
    {NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_frame",
                                    "A lock-step frame's hot path, compiled.", -1,
                                    module_methods};

PyMODINIT_FUNC PyInit__frame(void) {
  if (PyType_Ready(&PwmMapType) < 0 || PyType_Ready(&VehicleType) < 0 ||
      PyType_Ready(&FrameLoopType) < 0)
    return NULL;
  fill_powers_of_ten();
  PyObject *m = PyModule_Create(&module);
  if (!m) return NULL;
  if (PyModule_AddObjectRef(m, "PwmMap", (PyObject *)&PwmMapType) < 0 ||
      PyModule_AddObjectRef(m, "Vehicle", (PyObject *)&VehicleType) < 0 ||
      PyModule_AddObjectRef(m, "FrameLoop", (PyObject *)&FrameLoopType) < 0 ||
      PyModule_AddIntConstant(m, "READING_VALUES", READING_VALUES) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
