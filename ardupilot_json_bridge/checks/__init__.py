"""Convention checks: a simulator's IMU and odometry judged against REP-103 and each other."""
