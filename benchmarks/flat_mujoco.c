/*
 * The floor of a compiled MuJoCo lock-step frame: sitl_speed.py's flat Python backend in C.
 *
 *     flat_mujoco MODEL.xml [PORT]
 *
 * Built by sitl_speed.py (--flat) against the mujoco wheel's own headers and library. Per new
 * SITL frame, as the flat Python backend does: PWM 1 to 4 to rotor speeds (the quad X preset's
 * scaling), the rotors' first-order lag, thrust k w^2, MuJoCo's split step (mj_step2) and
 * forward pass, the sensors turned to NED/FRD and the reply's 17 numbers; a frame seen already
 * gets the last reply again. No session rules, checks, histories or recording: what a frame
 * costs when no interpreter runs in it, for the design of a compiled hot path (issue 32).
 */
#include <arpa/inet.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <mujoco/mujoco.h>

#define MAGIC_16 18458
#define FULL_SPEED 838.0

static double numeric(const mjModel* m, const char* name) {
  int id = mj_name2id(m, mjOBJ_NUMERIC, name);
  return id < 0 ? NAN : m->numeric_data[m->numeric_adr[id]];
}

static int sensor(const mjModel* m, const char* name) {
  int id = mj_name2id(m, mjOBJ_SENSOR, name);
  return id < 0 ? -1 : m->sensor_adr[id];
}

/* Little-endian unsigned integers of the servo packet, whatever the host's byte order. */
static uint32_t little(const uint8_t* bytes, int size) {
  uint32_t value = 0;
  for (int i = size - 1; i >= 0; i--) value = value << 8 | bytes[i];
  return value;
}

static double clamp(double value, double low, double high) {
  return value < low ? low : value > high ? high : value;
}

int main(int argc, char** argv) {
  char error[1000] = "";
  if (argc < 2) {
    fprintf(stderr, "usage: flat_mujoco MODEL.xml [PORT]\n");
    return 2;
  }
  mjModel* m = mj_loadXML(argv[1], NULL, error, sizeof(error));
  if (!m) {
    fprintf(stderr, "flat_mujoco: cannot load %s: %s\n", argv[1], error);
    return 1;
  }
  mjData* d = mj_makeData(m);
  if (!d) {
    fprintf(stderr, "flat_mujoco: cannot make the data of %s\n", argv[1]);
    return 1;
  }
  double thrust = numeric(m, "rotor_thrust_coefficient");
  double lag = numeric(m, "rotor_time_constant");
  double top = numeric(m, "rotor_max_speed");
  int gyro = sensor(m, "gyro"), accel = sensor(m, "accelerometer");
  if (isnan(thrust) || isnan(lag) || isnan(top) || gyro < 0 || accel < 0 || m->nu != 4) {
    fprintf(stderr, "flat_mujoco: %s is not the quad X (rotor numerics, imu sensors)\n",
            argv[1]);
    return 1;
  }
  double blend = 1.0 - exp(-m->opt.timestep / lag), h = sqrt(0.5);
  double speeds[4] = {0.0, 0.0, 0.0, 0.0};
  mj_forward(m, d);

  int port = argc > 2 ? atoi(argv[2]) : 9002;
  if (port <= 0 || port > 65535) {
    fprintf(stderr, "flat_mujoco: port %s is not 1 to 65535\n", argv[2]);
    return 2;
  }
  int sock = socket(AF_INET, SOCK_DGRAM, 0);
  if (sock < 0) {
    perror("flat_mujoco: socket");
    return 1;
  }
  struct sockaddr_in here = {0};
  here.sin_family = AF_INET;
  here.sin_port = htons((uint16_t)port);
  here.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(sock, (struct sockaddr*)&here, sizeof(here)) != 0) {
    perror("flat_mujoco: bind");
    return 1;
  }
  uint8_t data[1024];
  char reply[1024];
  int length = 0;
  int64_t last = -1;
  double origin = 0.0;
  for (;;) {
    struct sockaddr_in peer;
    socklen_t size = sizeof(peer);
    ssize_t got = recvfrom(sock, data, sizeof(data), 0, (struct sockaddr*)&peer, &size);
    if (got < 40 || little(data, 2) != MAGIC_16) continue;
    uint32_t count = little(data + 4, 4);
    double pwm[4];
    for (int i = 0; i < 4; i++) pwm[i] = little(data + 8 + 2 * i, 2);
    if ((int64_t)count != last) {
      if ((int64_t)count < last) origin = d->time;
      last = count;
      for (int i = 0; i < 4; i++) {
        double command = clamp((pwm[i] - 1100.0) / 800.0, 0.0, 1.0) * FULL_SPEED;
        speeds[i] += blend * (fmin(command, top) - speeds[i]);
        d->ctrl[i] = thrust * speeds[i] * speeds[i];
      }
      mj_step2(m, d);
      mj_forward(m, d);
      const mjtNum *q = d->qpos, *v = d->qvel, *s = d->sensordata;
      length = snprintf(
          reply, sizeof(reply),
          "\n{\"timestamp\":%.17g,\"imu\":{\"gyro\":[%.17g,%.17g,%.17g],"
          "\"accel_body\":[%.17g,%.17g,%.17g]},\"position\":[%.17g,%.17g,%.17g],"
          "\"quaternion\":[%.17g,%.17g,%.17g,%.17g],\"velocity\":[%.17g,%.17g,%.17g]}\n",
          d->time - origin, s[gyro], -s[gyro + 1], -s[gyro + 2], s[accel], -s[accel + 1],
          -s[accel + 2], q[1], q[0], -q[2], h * q[3] + h * q[6], h * q[4] + h * q[5],
          h * q[4] - h * q[5], h * q[3] - h * q[6], v[1], v[0], -v[2]);
    }
    if (length > 0) sendto(sock, reply, length, 0, (struct sockaddr*)&peer, size);
  }
}
