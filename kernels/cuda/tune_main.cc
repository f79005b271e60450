int main_placeholder_1026;
